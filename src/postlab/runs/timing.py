"""The calibration: the real code paths timed at bounded sizes on this machine (the model,
decoding, the RL objective, the engine's own steps), the unit costs :mod:`.pricing` scales."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
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
from postlab.machine.resources import (
    peak_growth,
    process_seconds,
    resident_bytes,
    usable_cores,
)
from postlab.plan.arms import arm_specs
from postlab.policies import Policy, build_policy
from postlab.records.chunks import chunk_bytes
from postlab.runs.counts import estimate_counts, plan_shape
from postlab.runs.limits import size_problems
from postlab.runs.pricing import Calibration, Line, RLWork, unit_seconds, work_parts
from postlab.tasks.contracts import DRAWN, score
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


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
    # the contract an arm scores rows with (one paid at random scores none)
    contract = next((arm.contract for arm in arm_specs(plan)
                     if arm.contract and arm.contract not in DRAWN), task.contracts[0])
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
    sft_step, _, rl_step = unit_seconds(plan, unit, most)
    parts = work_parts(plan, unit)
    budget = min(REAL_PATH_MAX_SECONDS,
                 max(REAL_PATH_SECONDS, REAL_PATH_SHARE * sum(parts.values())))
    if size_problems(estimate_counts(plan)):
        # a plan over the limits (run only with --allow-large) gets the floor: its steps are
        # modelled the least reliably, so a share of its modelled run bounds nothing
        budget = REAL_PATH_SECONDS
    # the evaluation of a few questions per split, against its modelled cost
    questions = max(1, DECODE_ROW_CAP // plan.eval_samples)
    few = plan.replace(split={name: pairs[:questions] for name, pairs in plan.split.items()})
    few_evaluation = unit_seconds(few, unit)[1]
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
            modelled = statistics.median(unit_seconds(plan, unit, w)[2] for w in done)
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
        shape = plan_shape(plan)
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
