"""Milliseconds per RL step: postlab against TRL's GRPOTrainer, side by side in one invocation.

    python bench/bench_trl.py [--plan examples/transformer-gpt2.json] [--steps 12]
                              [--device cpu|cuda] [--threads 1] [--sft-steps N]
                              [--no-profile]

Both sides train the same tiny GPT-2 (the plan's configuration, the same initial weights: the
parent checks their digests agree) on the same prompts in the same order, with the same group
size, completion length, PPO updates per rollout, clip range, KL coefficient, learning rate
and gradient clip, on one CPU thread by default. The KL is the k3 estimator on both sides
(TRL's only one), advantages are group-normalised and the loss is the token mean over the batch
(TRL's ``dapo``). One RL step is one rollout of prompts x group completions followed by
``updates_per_rollout`` optimiser steps; TRL counts each optimiser step, so its RL step is
that many trainer steps.

Gradient checkpointing, which TRL turns on by default, is off: postlab never recomputes a
forward pass, so leaving it on would charge TRL for work postlab does not do. What is not
matched: postlab samples only answer characters and EOS (its policies mask the rest), TRL
samples from the whole vocabulary (mean completion lengths come out within 1 %); TRL runs one
more forward pass per rollout for the old policy's log-probabilities, which postlab takes from
the first update's forward pass (each trainer's own design). Each side runs in a fresh process
with the same code-path pin, so neither warms the other's caches; the profile is taken in a
separate run, so the timed runs carry no profiler.

Needs the ``bench`` extra (``pip install 'postlab[bench]'``).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import hashlib
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = ROOT / "examples" / "transformer-gpt2.json"
WARMUP = 2
#: TRL, postlab as it runs, and postlab with the library's forward pass (what the compact
#: forward and prompt sharing are worth).
SIDES = ("trl", "postlab", "postlab-library-forward")


def _bench_plan(path: Path, steps: int) -> dict[str, Any]:
    from postlab.plan.frozen import load_plan

    plan = dict(load_plan(path).data)
    plan["rl_steps"] = WARMUP + steps
    plan["kl"] = "k3"
    plan["advantage"] = "group-std"
    plan["loss_reduction"] = "token-mean"
    return plan


def _initial_policy(plan: dict[str, Any], weights: Path, device: str) -> Any:
    """The plan's policy holding the weights both sides start from."""
    import torch

    from postlab.policies import build_policy

    policy = build_policy(plan)
    policy.load_state_dict(torch.load(weights, weights_only=True))
    return policy.to(device)


def _sft_weights(plan: dict[str, Any], path: Path) -> None:
    """The plan's SFT model for its first seed: RL starts where it would in a run, with
    groups that hold different rewards and completions that end."""
    import torch

    from postlab.engines.train import supervised
    from postlab.policies import build_policy

    torch.manual_seed(plan["seeds"][0])
    policy = build_policy(plan)
    supervised(policy, plan, plan["seeds"][0])
    torch.save(policy.state_dict(), path)


def _digest(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _prompt_sequence(plan: dict[str, Any]) -> list[list[int]]:
    """The pairs postlab's RL loop draws, step after step (its stream is seed + 2000)."""
    rng = random.Random(plan["seeds"][0] + 2000)
    pairs = []
    for _ in range(plan["rl_steps"]):
        pairs += rng.choices(plan["split"]["train"], k=plan["prompts_per_step"])
    return pairs


# --- one side per process -----------------------------------------------------------------

def run_postlab(plan: dict[str, Any], weights: Path, device: str, profile: bool,
                compact: bool = True) -> dict[str, Any]:
    from postlab.engines.train import reinforce

    policy = _initial_policy(plan, weights, device)
    if not compact:
        policy.compact = None  # the library's forward, for comparison
    reference = copy.deepcopy(policy)
    marks: list[float] = []
    start = time.perf_counter()

    def hook(step: int, rows: list) -> None:
        marks.append(time.perf_counter())

    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    reinforce(policy, reference, plan, plan["seeds"][0], "strict", hook)
    if profiler is not None:
        profiler.disable()
    steps = [b - a for a, b in zip([start, *marks], marks, strict=False)]
    result: dict[str, Any] = {"digest": _digest(reference.model),
                              "steps": steps}
    if profiler is not None:
        result["profile"] = _profile_shares(profiler, sum(steps))
    return result


#: Where a step's time goes: the outermost function of each phase (cumulative time).
PHASES = {
    "rollout decoding (KV cache)": ("postlab/engines/rollout.py", "generate"),
    "rows from tokens": ("postlab/engines/rollout.py", "to_rows"),
    "contract scoring": ("postlab/engines/train.py", "rewards_of"),
    "forward passes (policy and reference)": ("postlab/engines/train.py", "sequence_log_dist"),
    "backward": ("torch/_tensor.py", "backward"),
    "Adam step": ("torch/optim/optimizer.py", "wrapper"),
    "gradient clipping": ("torch/nn/utils/clip_grad.py", "_no_grad_wrapper"),
}


def _profile_shares(profiler: cProfile.Profile, total: float) -> dict[str, float]:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for label, (file, function) in PHASES.items():
        seconds = sum(entry[3] for (path, _, name), entry in stats.items()
                      if path.endswith(file) and name == function)
        shares[label] = seconds / total
    shares["everything else (losses, statistics, Python)"] = 1 - sum(shares.values())
    return shares


def run_trl(plan: dict[str, Any], weights: Path, device: str) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from postlab.tasks.contracts import score
    from postlab.tasks.registry import task_for
    from postlab.tasks.rows import Row

    task = task_for(plan)
    policy = _initial_policy(plan, weights, "cpu")
    vocab = plan["vocab"]
    inner = Tokenizer(WordLevel({c: i for i, c in enumerate(vocab)}))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=plan["eos"],
                                        pad_token=plan["pad"])
    eos = vocab.index(plan["eos"])
    pairs = _prompt_sequence(plan)
    dataset = Dataset.from_dict({"prompt": [task.prompt(p) for p in pairs],
                                 "a": [p[0] for p in pairs], "b": [p[1] for p in pairs]})

    def strict(prompts: list, completions: list, completion_ids: list, a: list, b: list,
               **_: Any) -> list[float]:
        """postlab's strict contract on the tokens TRL sampled."""
        rewards = []
        for ids, x, y in zip(completion_ids, a, b, strict=True):
            terminated = bool(ids) and ids[-1] == eos
            text = "".join(vocab[i] for i in (ids[:-1] if terminated else ids))
            rewards.append(score(Row.of([x, y, text, terminated]), "strict", task.answer))
        return rewards

    marks: list[float] = []
    updates = plan["updates_per_rollout"]

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if state.global_step % updates == 0:
                marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        policy.model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        config = GRPOConfig(
            output_dir=str(Path(tmp) / "out"), use_cpu=device == "cpu", seed=plan["seeds"][0],
            per_device_train_batch_size=plan["prompts_per_step"] * plan["group_size"],
            gradient_accumulation_steps=1, num_generations=plan["group_size"],
            max_completion_length=plan["max_new_tokens"], num_iterations=updates,
            max_steps=plan["rl_steps"] * updates, beta=plan["kl_beta"], epsilon=plan["clip"],
            learning_rate=plan["rl_lr"], lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, optim="adamw_torch", max_grad_norm=plan["gradient_clip"],
            temperature=plan["temperature"], top_k=0, top_p=1.0, loss_type="dapo",
            scale_rewards="group", shuffle_dataset=False, report_to="none",
            logging_steps=10**9, save_strategy="no", disable_tqdm=True, bf16=False,
            fp16=False, dataloader_num_workers=0, log_completions=False,
            # TRL turns recomputation on by default; postlab never recomputes a forward pass.
            gradient_checkpointing=False,
            model_init_kwargs={"attn_implementation": "eager", "dtype": torch.float32})
        trainer = GRPOTrainer(model=str(folder), reward_funcs=strict, args=config,
                              train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[Clock()])
        digest = _digest(trainer.model)
        start = time.perf_counter()
        trainer.train()
    steps = [b - a for a, b in zip([start, *marks], marks, strict=False)]
    return {"digest": digest, "steps": steps}


def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    plan = _bench_plan(args.plan, args.steps)
    if args.side == "trl":
        result = run_trl(plan, args.weights, args.device)
    else:
        result = run_postlab(plan, args.weights, args.device, args.child_profile,
                             compact=args.side == "postlab")
    print("RESULT " + json.dumps(result))


# --- the parent: both sides, then the ratio -------------------------------------------------

def _side(args: argparse.Namespace, side: str, weights: Path,
          profile: bool = False) -> dict[str, Any]:
    from postlab.machine import numerics

    env = dict(os.environ, **numerics.CODE_PATHS[numerics.portable_path()].environment,
               OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    command = ([sys.executable, __file__, "--side", side, "--plan", str(args.plan),
               "--steps", str(args.steps), "--device", args.device,
               "--threads", str(args.threads), "--weights", str(weights)]
               + (["--child-profile"] if profile else []))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{side} side failed:\n{done.stderr[-4000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def parent(args: argparse.Namespace) -> None:
    import torch

    plan = _bench_plan(args.plan, args.steps)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}, device "
          f"{args.device}, {args.threads} thread(s)")
    policy = plan["policy"]
    print(f"policy: {policy['architecture']} {policy['layers']} layers, {policy['heads']} "
          f"heads, width {policy['width']}; {plan['prompts_per_step']} prompts x group "
          f"{plan['group_size']}, {plan['max_new_tokens']} new tokens, "
          f"{plan['updates_per_rollout']} updates per rollout, KL k3 x {plan['kl_beta']}; "
          f"{args.steps} timed RL steps after {WARMUP} warm-up steps, from the plan's SFT "
          "model")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "sft.pt"
        _sft_weights(plan | ({"sft_steps": args.sft_steps} if args.sft_steps is not None
                             else {}), weights)
        results = {side: _side(args, side, weights) for side in SIDES}
        profile = (_side(args, "postlab", weights, profile=True)["profile"] if args.profile
                   else None)
    if len({result["digest"] for result in results.values()}) != 1:
        raise SystemExit("the sides did not start from the same weights")
    medians = {}
    for side, result in results.items():
        timed = result["steps"][WARMUP:]
        if len(timed) != args.steps:
            raise SystemExit(f"{side} reported {len(timed)} timed steps, not {args.steps}")
        medians[side] = statistics.median(timed) * 1e3
        print(f"  {side:24s} {medians[side]:7.1f} ms per RL step (median; min "
              f"{min(timed) * 1e3:.1f}, max {max(timed) * 1e3:.1f})")
    print(f"  postlab is x{medians['trl'] / medians['postlab']:.2f} TRL's speed per RL step "
          f"(x{medians['trl'] / medians['postlab-library-forward']:.2f} with the library's "
          "forward pass); same initial weights: yes")
    if profile is not None:
        print("where postlab's RL step spends its time (a separate run under cProfile, "
              "cumulative time, share of the step):")
        for label, share in profile.items():
            print(f"  {label:46s} {share * 100:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, default=DEFAULT_PLAN)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sft-steps", type=int, default=None,
                        help="SFT steps before RL (default: the plan's)")
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--weights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", dest="child_profile", action="store_true",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
