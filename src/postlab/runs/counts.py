"""What a plan's run does, counted from the plan alone: completions, tokens, gradient steps,
rows, and a rough memory model; nothing is built or timed, so an absurd plan is seen at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from postlab.plan.arms import arm_specs
from postlab.policies import POLICIES, policy_kind
from postlab.policies.tokenizers import vocab_size
from postlab.tasks.registry import task_for

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

# --- memory model (rough; bytes) -----------------------------------------------------------

FLOAT_BYTES = 4
#: One row [a, b, text, terminated] as Python objects (~180 bytes measured) plus its JSON.
ROW_BYTES = 200
#: A recorded SFT loss (a float in a list) and a recorded RL update (a dict of five floats).
SFT_STEP_BYTES = 32
RL_UPDATE_BYTES = 600
#: float32 copies of the parameters a worker holds (see MAX_PARAMETERS in :mod:`.limits`).
MODEL_COPIES = 8
#: ... where no step trains the base weights (adapters only, no SFT steps): the weights, the
#: untrained copy kept for RL-only arms, the checkpoint being written. The adapters' own
#: copies are a fraction of a percent of SmolLM2-135M's, and the dequantised copy a process
#: keeps of a GGUF model is in the calibration's measured base (it builds the model first).
FROZEN_BASE_COPIES = 3
#: Per position of a training forward/backward: hidden-sized tensors the GRU keeps for the
#: backward pass (output, gates, their gradients), and vocabulary-sized ones (logits, masked
#: logits, log-probabilities; RL adds the reference's, probabilities for the KL and entropy).
HIDDEN_TENSORS = 6
SFT_VOCAB_TENSORS = 3
RL_VOCAB_TENSORS = 8


@dataclass(frozen=True, kw_only=True)
class ComputeEstimate:
    """What one whole run of a plan costs: all seeds, all arms, one worker."""

    seeds: int
    arms: int
    #: RL rollouts plus every evaluation, including the re-evaluation of each saved checkpoint
    completions: int
    #: the RL rollouts alone: what the record's per-arm ``compute`` counts
    rl_completions: int
    #: upper bound: every completion uses ``max_new_tokens``
    tokens: int
    #: SFT steps and RL updates
    gradient_steps: int
    parameters: int
    #: the largest batch held at once: "RL step", "evaluation", "dynamic sampling" or "SFT"
    batch_kind: str
    batch_sequences: int
    batch_positions: int
    #: rough bytes of that batch (activations, logits, its rows)
    batch_bytes: int
    #: rows the record keeps
    record_rows: int
    #: rough peak of one worker: the largest batch, the model's copies and one seed's entry,
    #: plus, once calibrated, what the process holds before training (``base_bytes``)
    memory_bytes: int
    #: estimated wall time on one worker; None until calibrated
    seconds: float | None = None
    #: how long the calibration took; None until calibrated
    calibration_seconds: float | None = None
    #: resident memory of the process when calibrated (interpreter, torch, the policy's
    #: libraries, one model built); None until calibrated
    base_bytes: int | None = None
    #: when the calibration priced here was measured, where an earlier run's was reused
    calibration_reused_from: str | None = None
    #: the model's size is a pinned file's (a pretrained model), not a width the plan
    #: states: the parameter limit, a guard against a mistyped width, does not apply
    size_from_file: bool = False


# --- counts --------------------------------------------------------------------------------

def _vocab(plan: Plan) -> int:
    """The width of the policy's output: the plan's tokens, or a pretrained model's own
    vocabulary (SmolLM2's 49,152, where its plan's characters are about 30)."""
    if policy_kind(plan) == "pretrained":
        from postlab.policies.pretrained import pretrained_config

        return int(pretrained_config(plan).vocab_size)
    return vocab_size(plan)


def plan_shape(plan: Plan) -> dict[str, int]:
    """Sizes the counts and the calibration share."""
    task = task_for(plan)
    prompt = task.longest_prompt  # prompts are padded to one width
    parameters, work = POLICIES[policy_kind(plan)].size(plan)
    return {
        "prompt": prompt,
        "vocab": _vocab(plan),
        # inputs of one SFT step: the prompt and the target (answer and EOS) less its last
        "sft_positions": prompt + task.longest_answer,
        # positions a full decode reads, and an RL forward over prompt and response
        "decode_positions": prompt + plan.max_new_tokens - 1,
        "parameters": parameters,
        # multiply-adds of one forward step of one sequence
        "work": work,
    }


def _train_bytes(plan: Plan, rows: int, positions: int, vocab_tensors: int) -> int:
    per_position = (plan.embedding + HIDDEN_TENSORS * plan.hidden
                    + vocab_tensors * _vocab(plan))
    return rows * positions * per_position * FLOAT_BYTES * 2  # activations and their gradients


def _decode_bytes(plan: Plan, rows: int, prompt: int) -> int:
    """A decode keeps the prompt pass, a few per-step tensors, the emitted tokens and masks
    (as tensors and as Python lists) and one row per sequence."""
    emb, hid, vocab = plan.embedding, plan.hidden, _vocab(plan)
    floats = prompt * (emb + 4 * hid) + 4 * vocab + 4 * hid
    return rows * (floats * FLOAT_BYTES + 40 * plan.max_new_tokens + ROW_BYTES)


def estimate_counts(plan: Plan) -> ComputeEstimate:
    """Everything that follows from the plan alone; builds nothing and times nothing."""
    shape = plan_shape(plan)
    arms = arm_specs(plan)
    seeds = len(plan.seeds)
    rl_arms = sum(arm.is_rl for arm in arms)
    stages = 1 + len(arms)
    group = plan.group_size
    per_step = plan.prompts_per_step * group
    dynamic = plan.dynamic_sampling
    extra = dynamic.max_extra_groups * group if dynamic else 0
    split_sizes = [len(pairs) for pairs in plan.split.values()]
    per_evaluation = sum(split_sizes) * (1 + plan.eval_samples)  # greedy, then sampled
    # each stage is evaluated, saved, reloaded and evaluated again
    evaluations = seeds * stages * 2 * per_evaluation
    rl_completions = seeds * rl_arms * plan.rl_steps * (per_step + extra)
    completions = rl_completions + evaluations
    sft_steps = seeds * (plan.sft_steps + sum(a.own_sft_steps(plan) for a in arms))
    rl_updates = seeds * rl_arms * plan.rl_steps * plan.updates_per_rollout
    # the record keeps every rollout (dropped groups included) and one evaluation per stage;
    # a run holds one seed's entry until it is written into a chunk, never the whole record
    record_rows = rl_completions + seeds * stages * per_evaluation
    seed_bytes = (record_rows * ROW_BYTES + sft_steps * SFT_STEP_BYTES
                  + rl_updates * RL_UPDATE_BYTES) // max(1, seeds)

    positions = shape["decode_positions"]
    evaluation_bytes = 2 * per_evaluation * ROW_BYTES  # a stage's rows and the reload check's
    sampled = max(split_sizes) * plan.eval_samples
    batches = [("evaluation", sampled, positions,
                _decode_bytes(plan, sampled, shape["prompt"]) + evaluation_bytes),
               ("SFT", plan.sft_batch, shape["sft_positions"],
                _train_bytes(plan, plan.sft_batch, shape["sft_positions"],
                             SFT_VOCAB_TENSORS))]
    if rl_arms:
        batches.append(("RL step", per_step, positions,
                        _train_bytes(plan, per_step, positions, RL_VOCAB_TENSORS)
                        + _decode_bytes(plan, per_step, shape["prompt"])))
        if extra:
            batches.append(("dynamic sampling", extra, positions,
                            _decode_bytes(plan, extra, shape["prompt"])))
    kind, sequences, batch_positions, batch_bytes = max(batches, key=lambda b: b[3])
    frozen = plan.lora is not None and plan.sft_steps == 0 and not any(
        arm.own_sft_steps(plan) for arm in arms)
    model_bytes = shape["parameters"] * FLOAT_BYTES * (FROZEN_BASE_COPIES if frozen
                                                       else MODEL_COPIES)
    return ComputeEstimate(
        seeds=seeds, arms=len(arms), completions=completions, rl_completions=rl_completions,
        tokens=completions * plan.max_new_tokens, gradient_steps=sft_steps + rl_updates,
        parameters=shape["parameters"], batch_kind=kind, batch_sequences=sequences,
        batch_positions=batch_positions, batch_bytes=batch_bytes, record_rows=record_rows,
        memory_bytes=batch_bytes + model_bytes + seed_bytes,
        size_from_file=policy_kind(plan) == "pretrained")
