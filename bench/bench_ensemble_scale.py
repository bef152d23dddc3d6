"""How the ensemble engine scales with members on one device: the teaching plan's whole
computation (SFT, both RL arms, every evaluation) for 1,000 and 10,000 seeds.

    python bench/bench_ensemble_scale.py --device cuda [--members 1000,10000] [--rl-steps N]
                                         [--policy gru|gpt2|llama] [--chunk N]
                                         [--baseline-source CHECKOUT --baseline-chunk N]

For each size, members are chunked to fit the device's memory (as ``postlab run --engine
ensemble`` does) and the phases are timed: SFT of every seed, its evaluation, RL of every
(seed, arm) and their evaluation. What is timed is the computation a seed-run consists of;
building the record's rows as Python objects and writing run folders are left out and said
so (``postlab run`` adds them; for 10,000 seeds the records alone are gigabytes). Prints
seconds per phase, seed-runs per second, the chunk size and the device's peak memory.
``--policy`` swaps the GRU for the small transformers of ``bench_ensemble.py``.

``--baseline-source CHECKOUT``: each size is timed again, right after, with the engine of an
earlier postlab (this script run with that checkout's ``src`` first on the path), in chunks
of ``--baseline-chunk`` seeds (what that version's tasks trained at once: 128 on a CPU before
chunks followed the cache), and the ratio of the two times is printed.

The arithmetic: the floating-point operations of one seed-run, per phase, are counted by
torch's own counter (``torch.utils.flop_counter``: every matrix product the engine runs,
forward and backward) on a few members first, and the device's fp32 matrix-product limit is
measured here (the best of several large products, on the plan's threads); each size then
prints the share of that limit its training reached. The small GRU's products are a few
dozen wide, so the share says how far the engine is from what the hardware could do.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from bench_ensemble import TRANSFORMERS  # this folder is on the path of its scripts


def engine_plan(data: dict) -> Any:
    """The plan as the engine being timed takes it: typed (``postlab.plan.schema.Plan``), or
    the dict itself for an earlier postlab (``--baseline-source``) that read plans as dicts."""
    try:
        from postlab.plan.schema import Plan
    except ImportError:
        return data
    return Plan.of(data)


def run_size(members: int, plan: Any, device: str, chunk: int | None,
             flops: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds per phase for ``members`` seed-runs; ``flops``, if given, gets each phase's
    floating-point operations as torch counts them (slower: for a few members)."""
    from postlab.engines.ensemble import engine
    from postlab.engines.ensemble.nets import net_for
    from postlab.engines.ensemble.task import chunk_seeds
    from postlab.policies.base import build_policy

    where = torch.device(device)
    net = net_for(plan, where)
    tables = engine.Tables(plan, where, net.tokenizer)
    size = chunk or chunk_seeds(plan, device, 3)
    times = {"init": 0.0, "sft": 0.0, "sft_eval": 0.0, "rl": 0.0, "rl_eval": 0.0}

    def timed(name: str, fn):
        if where.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if flops is not None:
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as counter:
                out = fn()
            flops[name] = flops.get(name, 0.0) + counter.get_total_flops()
        else:
            out = fn()
        if where.type == "cuda":
            torch.cuda.synchronize()
        times[name] += time.perf_counter() - start
        return out

    for first in range(0, members, size):
        seeds = list(range(first + 1, min(first + size, members) + 1))
        count = len(seeds)

        def init(seeds=seeds):
            states = []
            for seed in seeds:
                torch.manual_seed(seed)
                states.append(build_policy(plan).state_dict())
            return net.stack(states)

        params = timed("init", init)
        seed_tensor = torch.tensor(seeds, device=where)
        plans = [plan] * count
        timed("sft", lambda params=params, seed_tensor=seed_tensor,
              plans=plans: engine.supervised(
                  params, net, tables, plan, seed_tensor,
                  engine.shared(plans, "sft_lr"),
                  engine.per_member(plans, "gradient_clip", where),
                  plan["sft_steps"] if isinstance(plan, dict) else plan.sft_steps))
        timed("sft_eval", lambda params=params, seed_tensor=seed_tensor,
              plans=plans: engine.evaluate(params, net, tables, plans, seed_tensor,
                                           keep_rows=False))
        start = {k: torch.cat([v, v]) for k, v in params.items()}
        reference = {k: v.clone() for k, v in start.items()}
        rl_seeds = torch.cat([seed_tensor, seed_tensor])
        contracts = ["strict"] * count + ["substring"] * count
        timed("rl", lambda start=start, reference=reference,
              rl_seeds=rl_seeds, contracts=contracts, plans=plans: engine.reinforce(
                  start, reference, net, tables, plans * 2, rl_seeds, contracts,
                  keep_rows=False))
        timed("rl_eval", lambda start=start, rl_seeds=rl_seeds,
              plans=plans: engine.evaluate(start, net, tables, plans * 2, rl_seeds,
                                           keep_rows=False))
    times["chunk"] = size
    return times


def arithmetic(plan: Any, device: str, members: int = 8) -> dict[str, float]:
    """Floating-point operations of one seed-run per phase, counted by torch over
    ``members`` seed-runs (every phase's work grows with members, one seed-run each)."""
    flops: dict[str, float] = {}
    run_size(members, plan, device, members, flops)
    return {name: value / members for name, value in flops.items()}


def matmul_limit(device: str, size: int = 2048, repeats: int = 5) -> float:
    """This device's fp32 matrix-product throughput, FLOP/s: the best of ``repeats`` products
    of two ``size`` x ``size`` matrices, on the threads torch is set to use."""
    where = torch.device(device)
    a = torch.randn(size, size, device=where)
    b = torch.randn(size, size, device=where)
    best = float("inf")
    for _ in range(repeats + 1):  # the first warms up
        if where.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--members", default="1000,10000")
    parser.add_argument("--rl-steps", type=int)
    parser.add_argument("--chunk", type=int, help="seeds at a time (default: what memory holds)")
    parser.add_argument("--policy", choices=["gru", *TRANSFORMERS], default="gru")
    parser.add_argument("--baseline-source", type=Path,
                        help="a checkout of an earlier postlab, timed after each size")
    parser.add_argument("--baseline-chunk", type=int, help="its seeds at a time")
    parser.add_argument("--timing-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from postlab.machine.device import prepare

    prepare(args.device)  # the cuBLAS workspace setting, before torch touches CUDA
    from postlab.plan.frozen import teaching_plan
    from postlab.runs.executors import configure_torch

    data = teaching_plan() | ({} if args.rl_steps is None else {"rl_steps": args.rl_steps})
    if args.policy != "gru":
        data["policy"] = TRANSFORMERS[args.policy]
    plan = engine_plan(data)
    configure_torch(data["threads"], args.device)
    name = (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
            else platform.processor() or platform.machine())
    print(f"device: {args.device} ({name}); torch {torch.__version__}; teaching plan"
          + ("" if args.rl_steps is None else f" with rl_steps={args.rl_steps}")
          + ("" if args.policy == "gru" else f", policy {data['policy']}"))
    if args.timing_only:  # a baseline's timing, for the invocation that started it
        for members in (int(m) for m in args.members.split(",")):
            times = run_size(members, plan, args.device, args.chunk)
            print(json.dumps(times))
        return
    counted = arithmetic(plan, args.device)
    limit = matmul_limit(args.device)
    total_flops = sum(counted.values())
    print(f"arithmetic: {total_flops / 1e9:.2f} GFLOP per seed-run, counted by torch on 8 "
          f"members ({', '.join(f'{k} {v / 1e9:.2f}' for k, v in counted.items())}); fp32 "
          f"matrix-product limit measured here {limit / 1e9:.1f} GFLOP/s on "
          f"{torch.get_num_threads()} threads")
    for members in (int(m) for m in args.members.split(",")):
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        times = run_size(members, plan, args.device, args.chunk)
        total = sum(v for k, v in times.items() if k != "chunk")
        peak = (f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
                if args.device.startswith("cuda") else "n/a")
        phases = " ".join(f"{k} {v:.1f}s" for k, v in times.items() if k != "chunk")
        reached = total_flops * members / total / limit
        print(f"{members:6d} seeds: {total:8.1f} s, {members / total:8.2f} seed-runs/s "
              f"(chunk {int(times['chunk'])} seeds; peak {peak}; {phases}); "
              f"{reached:.2%} of the matrix-product limit", flush=True)
        if args.baseline_source is not None:
            before = baseline(args, members)
            spent = sum(v for k, v in before.items() if k != "chunk")
            phases = " ".join(f"{k} {v:.1f}s" for k, v in before.items() if k != "chunk")
            print(f"{'':6} baseline {spent:8.1f} s, {members / spent:8.2f} seed-runs/s "
                  f"(chunk {int(before['chunk'])} seeds; {phases}); "
                  f"{total_flops * members / spent / limit:.2%} of the limit; this version "
                  f"x{spent / total:.2f}", flush=True)


def baseline(args: argparse.Namespace, members: int) -> dict[str, float]:
    """Seconds per phase of ``members`` seed-runs with the engine of ``--baseline-source``
    (this script, run in a process whose path starts at that checkout's ``src``)."""
    command = [sys.executable, __file__, "--timing-only", "--device", args.device,
               "--members", str(members), "--policy", args.policy]
    if args.rl_steps is not None:
        command += ["--rl-steps", str(args.rl_steps)]
    if args.baseline_chunk is not None:
        command += ["--chunk", str(args.baseline_chunk)]
    env = {**os.environ, "PYTHONPATH": str(args.baseline_source.resolve() / "src")}
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
