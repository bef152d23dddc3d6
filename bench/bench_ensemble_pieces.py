"""The ensemble engine checked piece by piece against the exact one, for any policy kind.

    python bench/bench_ensemble_pieces.py [--policy gru|gpt2|llama] [--plan FILE] [--seeds 32]
                                          [--checks 1,2,3,4,5]

Outcomes over seeds (``bench_ensemble.py``) are noisy for policies whose results vary a lot
between seeds; these checks take the randomness out one piece at a time:

1. SFT of one seed through the ensemble, fed the exact engine's batches: its losses.
2. RL of one seed (the RL arm, below) through the ensemble, fed the exact engine's prompts and
   rollouts step by step: its update statistics, until float32 rounding drifts apart.
3. Sampling: 4,000 answers to each of six held-out questions from the same weights, drawn by
   each engine; a chi-squared test over the answers seen at least 20 times.
4. RL from the same SFT checkpoints (``--seeds`` of them, trained by the exact engine): final
   KL and held-out hacking gap of each engine's RL arm, paired by checkpoint.
5. SFT by each engine from the same initial weights (the exact engine twice, with two streams
   of batches, as a control), then the same RL for all three: held-out success after SFT and
   held-out hacking gap after RL, paired by seed.

The plan is the teaching plan with ``--policy``, or ``--plan`` (an example's, say). RL runs the
plan's substring arm, or its first arm where it has none. ``--checks`` picks some of the five.
Prints each result; a difference is given as mean ± its standard error over seeds.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from bench_ensemble import TRANSFORMERS  # this folder is on the path of its scripts

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def _accepted(rows: list, contract: str) -> float:
    from postlab.tasks.contracts import CONTRACTS

    return sum(bool(CONTRACTS[contract]((a, b), text, done, a + b))
               for a, b, text, done in rows) / len(rows)


def _gap(rows: list) -> float:
    return _accepted(rows, "substring") - _accepted(rows, "strict")


def _paired(name: str, first: list[float], second: list[float], labels: tuple[str, str]) -> None:
    diffs = [b - a for a, b in zip(first, second, strict=True)]
    error = statistics.stdev(diffs) / math.sqrt(len(diffs))
    print(f"  {name:26} {labels[0]:>8} {statistics.mean(first):7.4f}  {labels[1]:>8} "
          f"{statistics.mean(second):8.4f}  difference {statistics.mean(diffs):+.4f} "
          f"± {error:.4f}")


class Setup:
    """The plan, the ensemble's net and tables, and the exact engine's pieces."""

    def __init__(self, plan: Plan) -> None:
        from postlab.engines.ensemble import engine
        from postlab.engines.ensemble.nets import net_for

        self.plan = plan
        self.net = net_for(plan, "cpu")
        self.tables = engine.Tables(plan, torch.device("cpu"), self.net.tokenizer)
        self.width = plan.max_new_tokens
        self.arm = "substring" if "substring" in plan.arms else plan.arms[0]

    def tokens_of(self, rows: list) -> tuple[torch.Tensor, torch.Tensor]:
        """Recorded rows back to the token and mask tensors decoding gave ([1, batch, T])."""
        tok = self.tables.tokenizer
        tokens, masks = [], []
        for _, _, text, done in rows:
            ids = tok.encode(text) + ([tok.eos_id] if done else [])
            masks.append([True] * len(ids) + [False] * (self.width - len(ids)))
            tokens.append(ids + [tok.pad_id] * (self.width - len(ids)))
        return torch.tensor([tokens]), torch.tensor([masks])

    def built(self, seed: int):
        from postlab.policies.base import build_policy

        torch.manual_seed(seed)
        return build_policy(self.plan)


def sft_with_exact_batches(setup: Setup, seed: int) -> None:
    import random

    from postlab import counter
    from postlab.engines.ensemble import engine
    from postlab.engines.train import supervised

    plan = setup.plan
    model = setup.built(seed)
    params = setup.net.stack([model.state_dict()])
    train = setup.tables.train
    rng = random.Random(seed + 1000)  # the exact engine's SFT stream
    batches = [[train.index(tuple(p)) for p in rng.choices(plan.split["train"],
                                                        k=plan.sft_batch)]
               for _ in range(plan.sft_steps)]
    draws = counter.integers

    def exact_batches(seeds, stream, step, positions, high):
        if stream == counter.SFT_BATCH:
            return torch.tensor([batches[step]])
        return draws(seeds, stream, step, positions, high)

    counter.integers = exact_batches
    try:
        ours = engine.supervised(params, setup.net, setup.tables, plan, torch.tensor([seed]),
                                 engine.shared([plan], "sft_lr"),
                                 engine.per_member([plan], "gradient_clip", "cpu"),
                                 plan.sft_steps)[0]
    finally:
        counter.integers = draws
    theirs = supervised(model, plan, seed)
    agree = next((step for step, (a, b) in enumerate(zip(theirs, ours, strict=True))
                  if abs(a - b) > 1e-4 * abs(a)), len(ours))
    print(f"1. SFT of seed {seed} with the exact engine's batches: the losses agree to 1e-4 "
          f"(relative) for the first {agree} of {len(ours)} steps (then float32 rounding "
          f"drifts apart; last loss {theirs[-1]:.4f} exact, {ours[-1]:.4f} ensemble)")


def rl_replay(setup: Setup, seed: int):
    from postlab import counter
    from postlab.engines.ensemble import engine
    from postlab.engines.train import reinforce, supervised

    plan = setup.plan
    model = setup.built(seed)
    supervised(model, plan, seed)
    reference = copy.deepcopy(model)
    trained, history, _ = reinforce(model, reference, plan, seed, setup.arm)
    group, train = plan.group_size, setup.tables.train
    draws, decode = counter.integers, engine.decode

    def exact_prompts(seeds, stream, step, positions, high):
        if stream == counter.RL_PROMPTS:
            rows = history[step - 1]["rows"]
            return torch.tensor([[train.index((r[0], r[1])) for r in rows[::group]]])
        return draws(seeds, stream, step, positions, high)

    def exact_rollouts(*args, **kwargs):
        return setup.tokens_of(history[args[7] - 1]["rows"])  # args[7]: the RL step

    counter.integers, engine.decode = exact_prompts, exact_rollouts
    try:
        params = setup.net.stack([model.state_dict()])
        ours = engine.reinforce(params, setup.net.stack([reference.state_dict()]), setup.net,
                                setup.tables, [plan], torch.tensor([seed]), [setup.arm])[0]
    finally:
        counter.integers, engine.decode = draws, decode
    agree = 0
    for step, (a, b) in enumerate(zip(history, ours, strict=True), start=1):
        pairs = [(x[k], y[k]) for x, y in zip(a["updates"], b["updates"], strict=True)
                 for k in x]
        if any(abs(p - q) > 1e-4 * max(abs(p), 1e-3) for p, q in pairs):
            break
        agree = step
    last = history[-1]["updates"][-1]
    print(f"2. RL of seed {seed} replayed on the exact engine's rollouts: every update "
          f"statistic agrees to 1e-4 (relative) for the first {agree} of {len(history)} steps "
          f"(then float32 rounding drifts apart; last KL {last['kl']:.4f} exact, "
          f"{ours[-1]['updates'][-1]['kl']:.4f} ensemble)")
    return trained


def sampling(setup: Setup, model, samples: int = 4000) -> None:
    from postlab import counter
    from postlab.engines.ensemble import engine
    from postlab.engines.rollout import generate, to_rows

    plan = setup.plan
    pairs = setup.tables.splits["test"][:6]
    repeated = [p for p in pairs for _ in range(samples)]
    with torch.no_grad():
        tokens, mask = generate(model, repeated, plan.max_new_tokens, plan.temperature,
                                torch.Generator().manual_seed(0))
        theirs = Counter(tuple(r) for r in to_rows(model, repeated, tokens, mask))
        params = setup.net.stack([model.state_dict()])
        tok = setup.tables.tokenizer
        tokens, mask = engine.decode(params, setup.net, setup.tables.prompts["test"][None, :6],
                                     plan.max_new_tokens,
                                     torch.tensor([float(plan.temperature)]),
                                     torch.tensor([12345]), counter.ROLLOUT, 1, tok.eos_id,
                                     tok.pad_id, repeat=samples)
        ours = Counter(tuple(r) for r in engine.all_rows(setup.tables, tokens, mask,
                                                         [repeated])[0])
    cells = [k for k in set(theirs) | set(ours) if theirs[k] + ours[k] >= 20]
    chi2 = sum((theirs[k] - ours[k]) ** 2 / (theirs[k] + ours[k]) for k in cells)
    print(f"3. {len(repeated)} answers per engine from one RL checkpoint: chi-squared "
          f"{chi2:.1f} on {len(cells)} answers seen at least 20 times (a difference in "
          "distribution would make it far larger than their number)")


def rl_from_same_starts(setup: Setup, seeds: list[int]) -> None:
    from postlab.engines.ensemble import engine
    from postlab.engines.rollout import evaluate_model
    from postlab.engines.train import reinforce, supervised

    plan = setup.plan
    tail = max(1, plan.rl_steps // 10)

    def final_kl(history: list) -> float:
        return math.log(statistics.mean(u["kl"] for h in history[-tail:] for u in h["updates"]))

    starts, exact_kl, exact_rows = [], [], []
    for seed in seeds:
        model = setup.built(seed)
        supervised(model, plan, seed)
        starts.append({k: v.clone() for k, v in model.state_dict().items()})
        trained, history, _ = reinforce(model, copy.deepcopy(model), plan, seed, setup.arm)
        exact_kl.append(final_kl(history))
        exact_rows.append(evaluate_model(trained, plan, seed))
    params = setup.net.stack(starts)
    seed_tensor = torch.tensor(seeds)
    plans = [plan] * len(seeds)
    histories = engine.reinforce(params, {k: v.clone() for k, v in params.items()}, setup.net,
                                 setup.tables, plans, seed_tensor, [setup.arm] * len(seeds))
    rows = engine.evaluate(params, setup.net, setup.tables, plans, seed_tensor)
    print(f"4. RL ({setup.arm} arm) from the same {len(seeds)} SFT checkpoints, paired by "
          "checkpoint:")
    labels = ("exact", "ensemble")
    _paired("log final KL", exact_kl, [final_kl(h) for h in histories], labels)
    for kind in ("greedy", "sampled"):
        _paired(f"held-out hacking gap, {kind}", [_gap(r["test"][kind]) for r in exact_rows],
                [_gap(r["test"][kind]) for r in rows], labels)


def sft_then_same_rl(setup: Setup, seeds: list[int]) -> None:
    from postlab.engines.ensemble import engine
    from postlab.engines.train import supervised

    plan, net, tables = setup.plan, setup.net, setup.tables
    plans = [plan] * len(seeds)
    seed_tensor = torch.tensor(seeds)
    initial, streams = [], {"exact A": [], "exact B": []}
    for seed in seeds:
        initial.append(setup.built(seed).state_dict())
        for name, offset in (("exact A", 1000), ("exact B", 7000)):
            model = setup.built(seed)
            supervised(model, plan, seed, rng_offset=offset)
            streams[name].append(model.state_dict())
    started = {name: net.stack(states) for name, states in streams.items()}
    ours = net.stack(initial)
    engine.supervised(ours, net, tables, plan, seed_tensor,
                      engine.shared(plans, "sft_lr"),
                      engine.per_member(plans, "gradient_clip", "cpu"), plan.sft_steps)
    started["ensemble"] = {k: v.detach().clone() for k, v in ours.items()}
    success, gaps = {}, {}
    rl_seeds = seed_tensor + 100_000  # the same RL draws whichever engine did the SFT
    for name, params in started.items():
        rows = engine.evaluate(params, net, tables, plans, seed_tensor)
        success[name] = [_accepted(r["test"]["sampled"], "strict") for r in rows]
        engine.reinforce(params, {k: v.clone() for k, v in params.items()}, net, tables, plans,
                         rl_seeds, [setup.arm] * len(seeds))
        rows = engine.evaluate(params, net, tables, plans, rl_seeds)
        gaps[name] = [_gap(r["test"]["sampled"]) for r in rows]
    print(f"5. SFT by each engine from the same {len(seeds)} initial weights (the exact engine "
          "twice, with two streams of batches: the control), then the same RL (ensemble, same "
          "draws), paired by seed; held-out, sampled:")
    for first, second in (("exact A", "exact B"), ("exact A", "ensemble"),
                          ("exact B", "ensemble")):
        _paired("strict success after SFT", success[first], success[second], (first, second))
        _paired("hacking gap after RL", gaps[first], gaps[second], (first, second))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["gru", *TRANSFORMERS], default="gpt2")
    parser.add_argument("--plan", type=Path, help="a plan file instead of the teaching plan "
                        "(--policy is then ignored)")
    parser.add_argument("--seeds", type=int, default=32,
                        help="checkpoints and seeds of checks 4 and 5 (at least 2)")
    parser.add_argument("--first-seed", type=int, default=501,
                        help="the first seed of checks 4 and 5")
    parser.add_argument("--checks", default="1,2,3,4,5", help="which checks, comma-separated")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2: differences need a standard error")
    checks = set(args.checks.split(","))
    if not checks or not checks <= {"1", "2", "3", "4", "5"}:
        parser.error("--checks takes numbers from 1 to 5, comma-separated")
    from postlab.plan.frozen import load_plan, teaching_plan
    from postlab.plan.schema import Plan
    from postlab.runs.executors import configure_torch

    if args.plan is not None:
        plan, name = load_plan(args.plan).model, str(args.plan)
    else:
        changes = {} if args.policy == "gru" else {"policy": TRANSFORMERS[args.policy]}
        plan, name = Plan.of(teaching_plan() | changes), "teaching plan"
    configure_torch(plan.threads)
    print(f"{name}, policy {plan.data().get('policy', 'gru')}; torch {torch.__version__}")
    setup = Setup(plan)
    print(f"RL arm: {setup.arm}")
    if "1" in checks:
        sft_with_exact_batches(setup, 7)
    if checks & {"2", "3"}:
        trained = rl_replay(setup, 5)
        if "3" in checks:
            sampling(setup, trained)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if "4" in checks:
        rl_from_same_starts(setup, seeds)
    if "5" in checks:
        sft_then_same_rl(setup, seeds)


if __name__ == "__main__":
    main()
