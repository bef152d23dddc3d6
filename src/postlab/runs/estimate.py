"""What a plan will cost, estimated before it trains; absurd plans are refused unless confirmed.

Every field of a plan is bounded by the schema, yet the bounds multiply: a valid plan can ask
for a billion sequences per RL step, a 50-million-parameter model or ten thousand samples per
question, and it would then train for days or exhaust memory hours in. So a run is first
estimated:

* counts follow from the plan alone: completions and gradient steps are what the engine will
  do (exact, with dynamic sampling's extra groups as an upper bound), tokens are an upper bound
  (every completion may use ``max_new_tokens``), memory is a rough figure for the largest batch
  held at once plus the model's copies and one seed's entry (a run writes each seed's rows
  into a chunk and lets them go);
* time and memory come from a short calibration: the real model code (the model, decoding
  with :func:`postlab.engines.rollout.generate`, the RL objective, the reward contract, record
  writing) is timed on this machine at bounded sizes and scaled linearly to the plan's sizes,
  the engine's own SFT, evaluation and RL steps are run a few times, within a small share of
  the modelled run, to correct for what the bounded timings leave out, and the peak memory
  of a decode and of an RL step is measured for the policy at hand; the process's memory
  before the engine's own steps are run is what a run holds before training, its age when
  calibrating began what the run spent starting.

:func:`check_size` refuses a plan over the limits below with a one-line :class:`UserError`,
unless the user confirms with ``--allow-large``. Count limits are checked before anything is
built or timed, so an absurd plan is refused at once.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from postlab.engines.optim import Adam
from postlab.engines.rollout import generate, to_rows
from postlab.engines.steps import gradient_step, policy_updates
from postlab.engines.train import (
    reference_log_dist,
    sequence_log_dist,
    sft_loss,
    update_rule,
)
from postlab.errors import UserError
from postlab.machine.resources import (
    peak_growth,
    process_seconds,
    resident_bytes,
    usable_cores,
)
from postlab.plan.arms import arm_specs
from postlab.policies import POLICIES, Policy, build_policy, policy_kind
from postlab.policies.tokenizers import vocab_size
from postlab.records.chunks import chunk_bytes
from postlab.tasks.contracts import score
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

GIB = 2**30

# --- limits: a plan over any of them needs --allow-large --------------------------------------

#: Rough peak memory of one worker: the process, the largest batch, the model's copies and one
#: seed's entry. Half of a 16 GB laptop; beyond it the machine swaps or the out-of-memory
#: killer ends the run, often hours in.
MAX_MEMORY_BYTES = 8 * GIB
#: Tokens generated (upper bound). Decoding is one Python step per token and every completion
#: becomes a record row, so 1e9 tokens is days of one core whatever the model.
MAX_TOKENS = 10**9
#: Rows the record keeps (RL rollouts and one evaluation per stage). They are written once,
#: in compressed chunks (about 3 bytes a row), and every reader walks them all in Python,
#: seed by seed: 5 million rows, 140 teaching seed-runs, take about a minute of each
#: report's time, so more is refused unless confirmed.
MAX_RECORD_ROWS = 5_000_000
#: Gradient steps, all seeds and arms. About 300 times the teaching plan's; even the smallest
#: model needs about a millisecond a step here, and each step's loss or statistics is recorded.
MAX_GRADIENT_STEPS = 1_000_000
#: Model parameters. Each worker holds about eight float32 copies (weights, gradients, Adam's
#: two moments, the KL reference, starting weights, the checkpoint being written), and a run
#: starts one worker per core by default: 25 million parameters are ~0.8 GB per worker. Every
#: token trained or generated also costs about this many multiply-adds.
MAX_PARAMETERS = 25_000_000
#: Estimated wall time on one worker: a day. Longer plans rarely finish on a laptop (sleep,
#: updates, battery) and are usually a mistyped count; confirm them explicitly.
MAX_SECONDS = 24 * 3600

ALLOW_FLAG = "--allow-large"

# --- memory model (rough; bytes) -----------------------------------------------------------

FLOAT_BYTES = 4
#: One row [a, b, text, terminated] as Python objects (~180 bytes measured) plus its JSON.
ROW_BYTES = 200
#: A recorded SFT loss (a float in a list) and a recorded RL update (a dict of five floats).
SFT_STEP_BYTES = 32
RL_UPDATE_BYTES = 600
#: float32 copies of the parameters a worker holds (see MAX_PARAMETERS).
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

# --- calibration ---------------------------------------------------------------------------

#: Multiply-adds one calibration measurement may do (tens of milliseconds of one core); the
#: plan's sizes are reached by scaling, so the plan's batch is never allocated.
CALIBRATION_WORK = 1e9
#: Most sequences one training or decoding measurement uses.
TRAIN_ROW_CAP = 64
DECODE_ROW_CAP = 1024
#: Cheap measurements are repeated for this long, keeping the fastest (the machine is shared).
REPEAT_SECONDS = 0.1
#: Adam and gradient clipping are timed on at most this many parameters and scaled.
OPTIMIZER_PROXY_ELEMENTS = 1 << 20
#: Once per run, after training: the summary, the fingerprint, the last syncs.
FINISH_SECONDS = 0.5
#: A run's start (interpreter, torch, the plan's checks) where the process's age is unknown.
STARTUP_SECONDS = 4.0
#: Checkpoints are written, synced, read back, hashed and re-evaluated after every stage.
CHECKPOINT_BYTES_PER_SECOND = 2e8
CALIBRATION_SEED = 20261129
#: The engine's own steps timed when calibrating (:func:`_time_real_paths`): at most
#: REAL_STEPS steps per call, the median seconds of REAL_REPEATS calls.
REAL_STEPS = 4
REAL_REPEATS = 3
#: What timing them may cost: REAL_PATH_SHARE of the modelled run, at least REAL_PATH_SECONDS
#: and at most REAL_PATH_MAX_SECONDS. A share, not a fixed second, because the longer a run
#: the more an error in its steps costs: the reasoning-gym plans' steps (0.2-0.7 s each) were
#: out of reach of one second, and their bounded timings alone put them 1.5-2.9 times their
#: measured time, while 12 s is about 1% of the longer one's run.
REAL_PATH_SHARE = 0.02
REAL_PATH_SECONDS = 1.0
REAL_PATH_MAX_SECONDS = 12.0


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
        from postlab.policies.transformer import pretrained_config

        return int(pretrained_config(plan).vocab_size)
    return vocab_size(plan)


def _shape(plan: Plan) -> dict[str, int]:
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
    shape = _shape(plan)
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


# --- calibration ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """Seconds per position of one call as ``fixed + per_row * rows``."""

    fixed: float
    per_row: float

    def seconds(self, rows: float, positions: int) -> float:
        return (self.fixed + self.per_row * rows) * positions


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Unit costs on this machine, measured at bounded sizes."""

    sft: Line  # one SFT forward and backward, batch built from pairs
    reference: Line  # the prompts and the reference's forward pass of one RL step
    update: Line  # one RL update's forward, objective and backward
    decode: Line  # one call of generate
    row_seconds: float  # per completion: turning tokens into a row and rewarding it
    write_seconds: float  # per record row written (into a chunk)
    optimizer_seconds: float  # per gradient step: clipping and Adam
    seconds: float  # how long calibrating took
    #: the process's age when calibrating began: what a run spends before (None: unknown)
    started_seconds: float | None = None
    #: real steps over the modelled ones, for an SFT step, a stage's evaluation and an RL
    #: step (:func:`_time_real_paths`): what the bounded measurements leave out
    factors: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: measured peak memory: of a decode per sequence (at the plan's positions), and of the
    #: engine's RL step at the plan's batch; None where not measured
    decode_row_bytes: float | None = None
    step_bytes: int | None = None
    #: resident memory once the bounded measurements are done and before the engine's own
    #: steps are timed: what a run holds before training (interpreter, torch and its kernels'
    #: buffers, the policy's libraries, one model)
    base_bytes: int
    #: when these figures were measured, where they were kept from an earlier run
    #: (:mod:`postlab.runs.calibrations`); None when measured by this process
    reused_from: str | None = None


def _bounded(rows: int, positions: int, least: int, work: float, cap: int) -> tuple[int, int]:
    """Rows and positions for one measurement: at most ``cap`` rows and CALIBRATION_WORK."""
    rows = min(rows, cap)
    if rows * positions * work > CALIBRATION_WORK:
        positions = max(least, min(positions, int(CALIBRATION_WORK // (rows * work))))
    if rows * positions * work > CALIBRATION_WORK:
        rows = max(1, int(CALIBRATION_WORK // (positions * work)))
    return rows, positions


def _fit(measure: Callable[[int], tuple[float, ...]], high: int) -> list[Line]:
    """Time ``measure`` (seconds per position) at ``high`` rows and an eighth of it, and fit a
    line per value, so small batches' fixed costs are not scaled by their rows."""
    low = max(1, high // 8)
    start = time.perf_counter()
    best_high = measure(high)  # first: a cold first call then errs on the slow side
    best_low = measure(low) if low != high else best_high
    for _ in range(4):
        if time.perf_counter() - start > REPEAT_SECONDS:
            break
        best_high = tuple(map(min, best_high, measure(high)))
        if low != high:
            best_low = tuple(map(min, best_low, measure(low)))
    lines = []
    for at_low, at_high in zip(best_low, best_high, strict=True):
        if low == high:
            lines.append(Line(0.0, at_high / high))
            continue
        per_row = max(0.0, (at_high - at_low) / (high - low))
        lines.append(Line(max(0.0, at_high - per_row * high), per_row))
    return lines


def _pairs(plan: Plan, count: int) -> list[list[int]]:
    return random.Random(CALIBRATION_SEED).choices(plan.split["train"], k=count)


def _time_sft(model: Policy, plan: Plan, shape: dict[str, int]) -> Line:
    """An SFT step as the exact engine takes it (its own loss,
    :func:`postlab.engines.train.sft_loss`, and gradient step), without the optimizer."""
    rows, positions = _bounded(plan.sft_batch, shape["sft_positions"], 1, 3 * shape["work"],
                               TRAIN_ROW_CAP)
    demonstration = task_for(plan).demonstration
    pool = _pairs(plan, rows)

    tokenizer = model.tokenizer

    def measure(count: int) -> tuple[float]:
        pairs = pool[:count]
        # the positions the bounded forward pass reads (outside the timing)
        width = max(len(tokenizer.encode(demonstration(pair))) + 1 for pair in pairs)
        read = min(positions, model.prompts(pairs).shape[1] + width - 1)
        start = time.perf_counter()
        loss = sft_loss(model, demonstration, pairs, positions=positions)
        model.zero_grad(set_to_none=True)
        gradient_step(loss, None, None, None)
        loss.item()
        return ((time.perf_counter() - start) / read,)

    return _fit(measure, rows)[0]


def _time_decode(model: Policy, plan: Plan,
                 shape: dict[str, int]) -> tuple[Line, float, float, float | None]:
    """One call of :func:`postlab.engines.rollout.generate` (its time and its peak memory
    per sequence); then rows and rewards per row, and the record's writing per row."""
    largest = max(len(pairs) for pairs in plan.split.values()) * plan.eval_samples
    largest = max(largest, plan.prompts_per_step * plan.group_size)
    rows, positions = _bounded(largest, shape["decode_positions"], shape["prompt"],
                               shape["work"], DECODE_ROW_CAP)
    steps = positions - shape["prompt"] + 1
    pool = _pairs(plan, rows)
    generator = torch.Generator(model.device).manual_seed(CALIBRATION_SEED)
    output: dict[str, Any] = {}

    def measure(count: int) -> tuple[float]:
        pairs = pool[:count]
        start = time.perf_counter()
        tokens, mask = generate(model, pairs, steps, plan.temperature, generator)
        elapsed = time.perf_counter() - start
        output.update(pairs=pairs, tokens=tokens, mask=mask)
        return (elapsed / (shape["prompt"] + tokens.shape[1] - 1),)

    line = _fit(measure, rows)[0]
    # the decode's memory at its peak, per sequence, at the plan's positions
    _, grown = peak_growth(lambda: measure(rows))
    row_bytes = None if grown is None else grown / rows * shape["decode_positions"] / positions
    task = task_for(plan)
    contract = next((arm.contract for arm in arm_specs(plan) if arm.contract),
                    task.contracts[0])
    start = time.perf_counter()
    made = to_rows(model, output["pairs"], output["tokens"], output["mask"])
    for row in made:
        score(Row.of(row), contract, task.answer)
    row_seconds = (time.perf_counter() - start) / len(made)
    # the rows as a record writes them: a seed's entry in a Parquet chunk
    entry = {"seed": 1, "evaluations": {"initial": {"test": {"greedy": made,
                                                             "sampled": made}}}}
    # timed warm: the first call imports pyarrow and builds the schema, once per run
    # (costs about 1 ms a row here, the writing itself about 0.01 ms)
    chunk_bytes([entry])
    start = time.perf_counter()
    chunk_bytes([entry])
    write_seconds = (time.perf_counter() - start) / (2 * len(made))
    return line, row_seconds, write_seconds, row_bytes


def _time_rl(model: Policy, plan: Plan, shape: dict[str, int],
             generator: torch.Generator) -> tuple[Line, Line]:
    """The reference pass and one update of an RL step: the engines' own functions
    (:func:`postlab.engines.train.reference_log_dist`,
    :func:`postlab.engines.steps.policy_updates`), without the optimizer."""
    rows, positions = _bounded(plan.prompts_per_step * plan.group_size,
                               shape["decode_positions"], 1, 4 * shape["work"], TRAIN_ROW_CAP)
    full = positions == shape["decode_positions"]
    length = plan.max_new_tokens if full else positions
    pool = _pairs(plan, rows)
    # the built tokenizer's ids: a BPE may have learnt fewer tokens than the plan allows
    tokens_all = torch.randint(0, model.tokenizer.vocab_size, (rows, length),
                               generator=generator).to(model.device)
    advantage_all = torch.randn(rows, generator=generator).to(model.device)

    rule = update_rule(plan, updates=1)

    def measure(count: int) -> tuple[float, float]:
        tokens, advantage = tokens_all[:count], advantage_all[:count]
        mask = torch.ones(tokens.shape, dtype=torch.bool, device=model.device)
        start = time.perf_counter()
        prompts = model.prompts(pool[:count])
        if not full:  # a bounded number of positions: one prompt column, fewer tokens
            prompts = prompts[:, :1]
        reference = reference_log_dist(model, prompts, tokens)
        middle = time.perf_counter()
        model.zero_grad(set_to_none=True)
        for update in policy_updates(rule, lambda: sequence_log_dist(model, prompts, tokens),
                                     reference, tokens, mask, advantage, optimizer=None):
            for value in update.values():
                value.item()
        end = time.perf_counter()
        read = prompts.shape[1] + tokens.shape[1] - 1
        return (middle - start) / read, (end - middle) / read

    reference, update = _fit(measure, rows)
    return reference, update


def _time_optimizer(model: Policy, plan: Plan, parameters: int,
                    generator: torch.Generator) -> float:
    """Gradient clipping and Adam's arithmetic, tensor by tensor, on the model's shapes, or
    on a bounded flat proxy scaled to the parameter count."""
    if parameters <= OPTIMIZER_PROXY_ELEMENTS:
        shapes = [p.shape for p in model.parameters()]
        scale = 1.0
    else:
        shapes = [torch.Size([OPTIMIZER_PROXY_ELEMENTS])]
        scale = parameters / OPTIMIZER_PROXY_ELEMENTS
    params = [torch.zeros(s) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)
    # the engines' own optimizer, on tensors of their own (the model is left as it is)
    optimizer = Adam(params, plan.rl_lr)

    def step() -> float:
        start = time.perf_counter()
        nn.utils.clip_grad_norm_(params, plan.gradient_clip).item()
        optimizer.step()
        return time.perf_counter() - start

    start = time.perf_counter()
    best = step()
    while time.perf_counter() - start < REPEAT_SECONDS:
        best = min(best, step())
    return best * scale


def _typical_seconds(call: Callable[[], Any], until: float,
                     first: Callable[[Callable[[], Any]], Any] | None = None) -> float:
    """The median seconds of REAL_REPEATS calls, or of those made by ``until`` (a
    ``perf_counter`` time; at least one call), so a step slower than modelled overruns the
    budget by one call at most; ``first``, where given, wraps the first call (to measure its
    memory on the way). The median, not the fewest: a run's steps take their typical time,
    and on a shared 2-core machine the fewest of three RL steps of the LoRA plan was 20%
    under their typical time (0.13 s against 0.15-0.18 s)."""
    seconds: list[float] = []
    while len(seconds) < REAL_REPEATS and (not seconds or time.perf_counter() < until):
        start = time.perf_counter()
        if first is not None and not seconds:
            first(call)
        else:
            call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _steps_within(budget: float, seconds: float, most: int) -> int:
    """Steps per call such that REAL_REPEATS calls of ``seconds`` a step fit ``budget``: at
    most ``most``, and 0 (none) once an earlier kind has overrun the budget and left it
    negative."""
    if seconds <= 0:
        return most
    return max(0, min(most, int(budget / (REAL_REPEATS * seconds))))


def _time_real_paths(model: Policy, plan: Plan, unit: Calibration
                     ) -> tuple[tuple[float, float, float], int | None]:
    """Run the engine's own code for a few steps where that is affordable, and return real
    over modelled seconds for an SFT step, an evaluation and an RL step (1.0 where a step
    would take too long to time). The bounded measurements time the model's arithmetic; the
    engine's loops add batch building, rewards and syncs, which
    made the teaching plan's steps 1.5-2.3 times the modelled ones (measured on 2 cores), and
    a bounded transformer's few positions carry its per-call costs, which scaled a LoRA
    plan's RL step to 3.5 times the real one.

    The kinds are timed in the order of their share of the modelled run, each only where
    REAL_REPEATS calls fit what is left of the budget (:data:`REAL_PATH_SHARE`); what each
    took, not what it was modelled to take, is spent. Also returns the RL step's peak memory,
    at the plan's batch, where it ran."""
    from postlab.engines.rollout import evaluate_model
    from postlab.engines.train import reinforce, supervised

    # an RL step priced as the calibration's untrained policy may take it: with dynamic
    # sampling's whole budget of extra groups
    dynamic = plan.dynamic_sampling
    most = replace(RLWork.expected(plan),
                   extra_groups=dynamic.max_extra_groups if dynamic else 0.0)
    sft_step, _, rl_step = _unit_seconds(plan, unit, most)
    parts = _work_parts(plan, unit)
    budget = min(REAL_PATH_MAX_SECONDS,
                 max(REAL_PATH_SECONDS, REAL_PATH_SHARE * sum(parts.values())))
    if size_problems(estimate_counts(plan)):
        # a plan over the limits (run only with --allow-large) gets the floor: its steps are
        # modelled the least reliably, so a share of its modelled run bounds nothing
        budget = REAL_PATH_SECONDS
    # the evaluation of a few questions per split, against its modelled cost
    questions = max(1, DECODE_ROW_CAP // plan.eval_samples)
    few = plan.replace(split={name: pairs[:questions] for name, pairs in plan.split.items()})
    few_evaluation = _unit_seconds(few, unit)[1]
    rl = next((arm for arm in arm_specs(plan) if arm.is_rl), None)
    factors = {"sft": 1.0, "evaluation": 1.0, "rl": 1.0}
    step_bytes = None

    def steps_within(seconds: float, most: int) -> int:
        return _steps_within(budget, seconds, most)

    for kind in sorted(factors, key=lambda k: parts[k], reverse=True):
        began = time.perf_counter()
        if kind == "sft" and parts["sft"] and (steps := steps_within(sft_step, REAL_STEPS)):
            supervised(model, plan, CALIBRATION_SEED, steps=1)  # its first step warms up
            factors["sft"] = _typical_seconds(lambda n=steps: supervised(
                model, plan, CALIBRATION_SEED, steps=n), began + budget) / steps / sft_step
        elif kind == "evaluation" and steps_within(few_evaluation, 1):
            factors["evaluation"] = _typical_seconds(lambda: evaluate_model(
                model, few, CALIBRATION_SEED), began + budget) / few_evaluation
        elif (kind == "rl" and rl is not None and parts["rl"]
              and (steps := steps_within(rl_step, REAL_STEPS))):
            some = plan.replace(rl_steps=steps)
            done: list[RLWork] = []

            def train(some: Plan = some, contract: str = rl.contract,
                      steps: int = steps, done: list[RLWork] = done) -> None:
                model.train()
                compute = reinforce(model, model.reference_policy(), some, CALIBRATION_SEED,
                                    contract)[2]
                done.append(RLWork.observed(plan, compute, steps))

            def measured(call: Callable[[], Any]) -> None:
                nonlocal step_bytes
                step_bytes = peak_growth(call)[1]

            seconds = _typical_seconds(train, began + budget, measured) / steps
            # against these steps' own work, not the run's: on the untrained policy dynamic
            # sampling draws its whole budget and dropping constant groups leaves no update
            # (the drop example's estimate was then 0.72-0.94 of its run)
            modelled = statistics.median(_unit_seconds(plan, unit, w)[2] for w in done)
            factors["rl"] = seconds / modelled
        budget -= time.perf_counter() - began
    return (factors["sft"], factors["evaluation"], factors["rl"]), step_bytes


def calibrate(plan: Plan) -> Calibration:
    """Time the real code paths at bounded sizes on this machine.

    Leaves torch's global random state and thread count as it found them, so a run after a
    calibration is bit-identical to a run without one: the model's initialisation draws from
    the global generator and is rolled back; everything else uses its own generators.
    """
    started = process_seconds()
    start = time.perf_counter()
    rng_state = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    try:
        # More threads than cores would only slow the run further; time what the cores give.
        torch.set_num_threads(max(1, min(plan.threads, usable_cores())))
        shape = _shape(plan)
        generator = torch.Generator().manual_seed(CALIBRATION_SEED)
        model = build_policy(plan)
        sft = _time_sft(model, plan, shape)
        decode, row_seconds, write_seconds, row_bytes = _time_decode(model, plan, shape)
        reference, update = _time_rl(model, plan, shape, generator)
        optimizer = _time_optimizer(model, plan, shape["parameters"], generator)
        unit = Calibration(sft=sft, reference=reference, update=update, decode=decode,
                           row_seconds=row_seconds, write_seconds=write_seconds,
                           optimizer_seconds=optimizer, seconds=0.0, base_bytes=0)
        # Before the engine's steps run at the plan's own batch: the allocator keeps their
        # peak, which the estimate counts as the batch's, so resident memory after them
        # counted it twice (the reasoning-gym chain-sum plan's estimate was 1.25 times its
        # measured peak with the later reading, 1.05 with this one; the GRU plans' stayed at
        # 0.92-1.00, measured by bench/bench_estimate.py).
        base_bytes = resident_bytes()
        factors, step_bytes = _time_real_paths(model, plan, unit)
    finally:
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng_state)
    return replace(unit, factors=factors, seconds=time.perf_counter() - start,
                   started_seconds=started, base_bytes=base_bytes,
                   decode_row_bytes=row_bytes, step_bytes=step_bytes)


def expected_extra_groups(plan: Plan) -> float:
    """Extra groups dynamic sampling is expected to draw per RL step, for the time (counts
    and memory keep the whole budget, ``max_extra_groups``, as their bound).

    A group's rewards are all equal when its ``group_size`` answers all pass or all fail:
    ``q**G + (1-q)**G`` for a question the policy passes with probability ``q``. Nothing is
    known of ``q`` before training, so it is taken as uniform on [0, 1], which makes that
    ``p = 2 / (G + 1)``; every constant group is drawn again, and a fresh group is constant with
    the same ``p``, so a step draws ``prompts * p / (1 - p) = prompts * 2 / (G - 1)`` groups on
    average without a budget; capped at the budget, which bounds the mean of a budgeted loop
    from above (8 prompts, G = 8, a budget of 2: 2 against 1.5 simulated). Rewards with
    partial credit are constant less often, so they draw fewer. The whole budget priced the
    dynamic-sampling example at 1.13-1.35 times its run (medians of three invocations of
    bench/bench_estimate.py), whose steps drew 0.5-1.2 extra groups of 8 (this model: 2.3).
    """
    dynamic = plan.dynamic_sampling
    if not dynamic:
        return 0.0
    budget = dynamic.max_extra_groups
    group = plan.group_size
    if group < 2:  # one answer per group: every group is constant
        return float(budget)
    return min(float(budget), plan.prompts_per_step * 2 / (group - 1))


@dataclass(frozen=True)
class RLWork:
    """What one RL step does besides its batch's decode: the extra groups dynamic sampling
    draws, and the updates (each over ``trained_rows`` rows, which the step's reference pass
    also reads; a step with no group to train on makes neither)."""

    extra_groups: float
    trained_rows: float
    updates: float

    @classmethod
    def expected(cls, plan: Plan) -> RLWork:
        """A run's step: the groups it is expected to draw, every update over the whole batch
        (dynamic sampling replaces most constant groups, so dropping the rest spares little)."""
        return cls(expected_extra_groups(plan), plan.prompts_per_step * plan.group_size,
                   plan.updates_per_rollout)

    @classmethod
    def observed(cls, plan: Plan, compute: dict[str, int], steps: int) -> RLWork:
        """What ``steps`` steps did, from their ``compute`` counts. An untrained policy's
        groups are nearly all constant: dynamic sampling then draws its whole budget, and a
        plan that drops constant groups may update on nothing at all."""
        batch = plan.prompts_per_step * plan.group_size
        updates = compute["gradient_steps"]
        return cls(max(0.0, compute["completions"] / steps - batch) / plan.group_size,
                   compute["examples_seen"] / updates if updates else 0.0, updates / steps)


def _unit_seconds(plan: Plan, c: Calibration,
                  rl: RLWork | None = None) -> tuple[float, float, float]:
    """Modelled seconds of an SFT step, a stage's evaluation (every split, greedy and
    sampled) and an RL step doing ``rl`` (default: :meth:`RLWork.expected`), each times its
    real-path factor."""
    shape = _shape(plan)
    positions = shape["decode_positions"]

    def decode(rows: float) -> float:
        return c.decode.seconds(rows, positions) + c.row_seconds * rows

    sft_step = c.sft.seconds(plan.sft_batch, shape["sft_positions"]) + c.optimizer_seconds
    evaluation = sum(decode(len(pairs)) + decode(len(pairs) * plan.eval_samples)
                     for pairs in plan.split.values())
    group = plan.group_size
    work = RLWork.expected(plan) if rl is None else rl
    rl_step = decode(plan.prompts_per_step * group)
    if work.extra_groups:  # one more decode call, or a few
        rl_step += decode(work.extra_groups * group)
    if work.trained_rows:
        rows = work.trained_rows
        # one reference pass per step that updates, each followed by updates_per_rollout
        passes = work.updates / plan.updates_per_rollout
        rl_step += (passes * c.reference.seconds(rows, positions)
                    + work.updates * (c.update.seconds(rows, positions) + c.optimizer_seconds))
    sft_factor, evaluation_factor, rl_factor = c.factors
    return sft_step * sft_factor, evaluation * evaluation_factor, rl_step * rl_factor


def _work_parts(plan: Plan, calibration: Calibration) -> dict[str, float]:
    """The engine's work on one worker, all seeds, priced by the calibration: its SFT
    steps, evaluations, RL steps, and the rest (checkpoints, the record's writing)."""
    shape = _shape(plan)
    c = calibration
    sft_step, evaluation, rl_step = _unit_seconds(plan, c)
    arms = arm_specs(plan)
    stages = 1 + len(arms)
    seeds = len(plan.seeds)
    checkpoint = shape["parameters"] * FLOAT_BYTES * 3 / CHECKPOINT_BYTES_PER_SECOND
    sft_steps = plan.sft_steps + sum(arm.own_sft_steps(plan) for arm in arms)
    rl_steps = plan.rl_steps * sum(arm.is_rl for arm in arms)
    # each seed's rows are written once, into a chunk (record.json is a small manifest)
    writing = c.write_seconds * estimate_counts(plan).record_rows
    return {"sft": seeds * sft_steps * sft_step,
            # each stage is evaluated, saved, reloaded and evaluated again
            "evaluation": seeds * stages * 2 * evaluation,
            "rl": seeds * rl_steps * rl_step,
            "other": seeds * stages * checkpoint + writing}


def wall_seconds(plan: Plan, calibration: Calibration) -> float:
    """The run's time on one worker, from its process's start: the engine's work
    (:func:`_work_parts`), priced by the calibration.

    Decodes are priced at ``max_new_tokens`` steps (an upper bound: decoding stops once every
    sequence has ended), and dynamic sampling at the extra groups it is expected to draw
    (:func:`expected_extra_groups`), not its whole budget. For models far larger than the
    teaching plan's the calibration sees only a few sequences, whose matrix products are less
    efficient than the plan's, so the estimate errs high (about twice the measured time at
    hidden 4096).
    """
    c = calibration
    # from the process's start: what it spent before calibrating, the calibration, then the
    # work, which every run in one process pays once
    started = STARTUP_SECONDS if c.started_seconds is None else c.started_seconds
    return started + c.seconds + sum(_work_parts(plan, c).values()) + FINISH_SECONDS


def estimate(plan: Plan, *, calibrated: bool = True) -> ComputeEstimate:
    """Counts, and with ``calibrated`` the wall time from a calibration on this machine."""
    counts = estimate_counts(plan)
    if not calibrated:
        return counts
    return priced(counts, plan, calibrate(plan))


def priced(counts: ComputeEstimate, plan: Plan,
           calibration: Calibration) -> ComputeEstimate:
    """The counts with this machine's figures: the wall time, and the process's own memory
    added to the plan's."""
    batch_bytes = measured_batch_bytes(plan, counts, calibration)
    return replace(counts, seconds=wall_seconds(plan, calibration),
                   calibration_seconds=calibration.seconds, batch_bytes=batch_bytes,
                   calibration_reused_from=calibration.reused_from,
                   memory_bytes=(counts.memory_bytes - counts.batch_bytes + batch_bytes
                                 + calibration.base_bytes),
                   base_bytes=calibration.base_bytes)


def measured_batch_bytes(plan: Plan, counts: ComputeEstimate,
                         calibration: Calibration) -> int:
    """The largest batch's memory from what the calibration measured where it could: a
    decode's peak per sequence times the plan's largest decode, the engine's RL step at the
    plan's batch; the modelled figure for the rest. The model above is written for the GRU,
    and put a small GPT-2's evaluation at a fifth of its measured 160 MiB."""
    if calibration.decode_row_bytes is None and calibration.step_bytes is None:
        return counts.batch_bytes
    sampled = max(len(pairs) for pairs in plan.split.values()) * plan.eval_samples
    per_evaluation = sum(len(p) for p in plan.split.values()) * (1 + plan.eval_samples)
    measured = [counts.batch_bytes if counts.batch_kind == "SFT" else 0]
    if calibration.decode_row_bytes is not None:
        measured.append(int(calibration.decode_row_bytes * sampled)
                        + 2 * per_evaluation * ROW_BYTES)
    if calibration.step_bytes is not None:
        measured.append(calibration.step_bytes)
    return max(measured)


# --- limits --------------------------------------------------------------------------------

def size_problems(est: ComputeEstimate) -> list[str]:
    """What exceeds a limit, with the figures; the time limit only once calibrated."""
    problems = []
    if est.memory_bytes > MAX_MEMORY_BYTES:
        problems.append(f"memory ~{format_bytes(est.memory_bytes)} (largest batch: "
                        f"{_batch(est)}) exceeds {format_bytes(MAX_MEMORY_BYTES)}")
    if est.tokens > MAX_TOKENS:
        problems.append(f"up to {format_count(est.tokens)} tokens generated exceeds "
                        f"{format_count(MAX_TOKENS)}")
    if est.record_rows > MAX_RECORD_ROWS:
        problems.append(f"{format_count(est.record_rows)} record rows exceeds "
                        f"{format_count(MAX_RECORD_ROWS)}")
    if est.gradient_steps > MAX_GRADIENT_STEPS:
        problems.append(f"{format_count(est.gradient_steps)} gradient steps exceeds "
                        f"{format_count(MAX_GRADIENT_STEPS)}")
    if est.parameters > MAX_PARAMETERS and not est.size_from_file:
        problems.append(f"{format_count(est.parameters)} model parameters exceeds "
                        f"{format_count(MAX_PARAMETERS)}")
    if est.seconds is not None and est.seconds > MAX_SECONDS:
        problems.append(f"about {format_seconds(est.seconds)} on one worker exceeds "
                        f"{format_seconds(MAX_SECONDS)}")
    return problems


def _refuse(problems: Sequence[str]) -> UserError:
    return UserError(f"plan too large: {'; '.join(problems)}; pass {ALLOW_FLAG} to run it "
                     "anyway")


def check_size(plan_data: dict[str, Any], allow_large: bool,
               calibration: Callable[[dict[str, Any]], Calibration] = calibrate
               ) -> ComputeEstimate:
    """Estimate a valid plan and refuse it if it exceeds a limit, unless ``allow_large``.

    Count limits are checked before calibrating, so nothing of an absurd plan is built; the
    calibration itself never allocates more than bounded sizes, even when allowed.
    ``calibration`` gives the figures (a run's reuses a kept one: :mod:`.calibrations`).
    """
    counts = estimate_counts(plan_data)
    problems = size_problems(counts)
    if problems and not allow_large:
        raise _refuse(problems)
    est = priced(counts, plan_data, calibration(plan_data))
    if not allow_large and size_problems(est):
        raise _refuse(size_problems(est))
    return est


# --- rendering -----------------------------------------------------------------------------

def format_count(n: float) -> str:
    """Thousands separators up to ten million, then a short form."""
    if n < 10_000_000:
        return f"{round(n):,}"
    for size, suffix in ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M")):
        if n >= size:
            value = n / size
            return f"{value:,.1f}{suffix}" if value < 1000 else f"{n:.2e}"
    return f"{n:,.0f}"  # pragma: no cover - the loop always returns


def format_bytes(n: float) -> str:
    for size, unit in ((2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"),
                       (2**10, "KiB")):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{n:.0f} B"


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def _batch(est: ComputeEstimate) -> str:
    return (f"{est.batch_kind} {format_count(est.batch_sequences)} x {est.batch_positions} "
            f"positions, ~{format_bytes(est.batch_bytes)}")


def render_estimate(est: ComputeEstimate) -> str:
    """Two lines for a person: what the run does, and what it needs here."""
    arms = "arm" if est.arms == 1 else "arms"
    seeds = "seed" if est.seeds == 1 else "seeds"
    first = (f"estimate: {est.seeds} {seeds} x {est.arms} {arms}; "
             f"{format_count(est.completions)} completions, <= {format_count(est.tokens)} "
             f"tokens, {format_count(est.gradient_steps)} gradient steps, "
             f"{format_count(est.parameters)} parameters")
    second = f"largest batch {_batch(est)}; memory ~{format_bytes(est.memory_bytes)}"
    if est.base_bytes is not None:
        second += f" ({format_bytes(est.base_bytes)} of it before training)"
    if est.seconds is None:
        second += "; time not calibrated"
    elif est.calibration_reused_from is not None:
        second += (f"; about {format_seconds(est.seconds)} on one worker here (calibration of "
                   f"{est.calibration_reused_from} reused; --recalibrate measures again)")
    else:
        second += (f"; about {format_seconds(est.seconds)} on one worker here (calibrated in "
                   f"{est.calibration_seconds or 0:.1f} s)")
    return f"{first}\n{second}"
