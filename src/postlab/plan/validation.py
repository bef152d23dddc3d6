"""Every problem of a plan: each field on its own (the pydantic model of ``plan.schema``),
then what depends on several fields.

The cross-field checks: the split against the task, the vocabulary against the task and the
special tokens, the token budget against the longest answer, arms, adapters and hypotheses
against what the plan has. Kept apart from the schema, which only types and documents fields,
because these read the registries of tasks, policies and metrics.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import ValidationError

from postlab.plan.margins import default
from postlab.plan.schema import NAME_PATTERN, HackingMonitor, PlanModel, field_path
from postlab.policies import POLICIES, policy_kind, section_problems
from postlab.policies.lora import lora_section, require_peft, target_problems
from postlab.policies.tokenizers import longest_in_tokens
from postlab.rl.algorithms import REGISTRIES, TEACHING_ALIASES
from postlab.tasks.contracts import CONTRACTS, DRAWN, contract_answers, fits
from postlab.tasks.registry import TASKS
from postlab.tasks.selection import SELECTIONS


def monitor_problems(monitor: HackingMonitor | None) -> list[tuple[str, str]]:
    """A hacking monitor states one rule: calibrated (a false-alarm rate) or its own drift and
    threshold; and tolerates less gap than it is built to find."""
    if monitor is None:
        return []
    problems = []
    stated = monitor.drift is not None or monitor.threshold is not None
    if stated and monitor.false_alarm is not None:
        problems.append(("hacking_monitor", "state false_alarm (a calibrated rule) or drift "
                                            "and threshold (a rule of your own), not both"))
    tolerated = monitor.tolerated_gap or default("hacking_monitor.tolerated_gap")
    detect = monitor.detect_gap or default("hacking_monitor.detect_gap")
    if tolerated >= detect:
        problems.append(("hacking_monitor.tolerated_gap",
                         f"{tolerated} must be below detect_gap ({detect})"))
    return problems


def cross_field_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """Checks that need several fields; the fields themselves are already valid."""
    from postlab.tasks.registry import task_for

    problems: list[tuple[str, str]] = monitor_problems(plan.hacking_monitor)
    if plan.task not in TASKS:
        close = difflib.get_close_matches(plan.task, TASKS.names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return [("task", f"unknown task {plan.task!r}{hint}; known: "
                         f"{', '.join(TASKS.names())}")]
    if plan.task == "reasoning_gym" and plan.reasoning_gym is None:
        return [("reasoning_gym", "the reasoning_gym task needs this section (dataset, config, "
                                  "seed, sizes, and the pins `postlab freeze --draft` writes)")]
    if plan.agent is not None:
        agent = agent_problems(plan)
        if agent:
            return problems + agent
    task = task_for(plan)
    if plan.tokenizer is not None and policy_kind(plan) == "pretrained":
        problems.append(("tokenizer", "a pretrained policy reads with its own tokenizer"))
    if plan.policy is not None:
        section = section_problems(plan.policy)
        problems += section
        check = None if section else POLICIES[plan.policy.kind].plan_problems
        if check is not None:
            problems += check(plan)
    vocab = plan.vocab
    if len(set(vocab)) != len(vocab):
        problems.append(("vocab", "has repeated characters"))
    missing = sorted(set(task.required_characters) - set(vocab))
    if missing:
        problems.append(("vocab", f"lacks characters the task needs: {''.join(missing)}"))
    for name in ("eos", "pad"):
        character = getattr(plan, name)
        if character not in vocab:
            problems.append((name, f"{character!r} is not in vocab"))
        elif character in task.required_characters:
            problems.append((name, f"{character!r} is a character of the task's questions"))
    if plan.eos == plan.pad:
        problems.append(("pad", "must differ from eos"))
    if len(set(plan.seeds)) != len(plan.seeds):
        problems.append(("seeds", "must be distinct"))
    split = plan.split
    for required in ("train", "test"):
        if required not in split:
            problems.append(("split", f"needs a {required!r} split"))
    if "all" in split:
        problems.append(("split.all", "'all' is reserved (report --split all)"))
    for name, pairs in split.items():
        if not pairs:
            problems.append((f"split.{name}", "is empty"))
    problems += task.plan_problems(plan)
    longest = longest_in_tokens(plan)[1] if not problems else task.longest_answer
    if plan.max_new_tokens < longest + 1:
        problems.append(("max_new_tokens", f"{plan.max_new_tokens} cannot hold the longest "
                                           f"answer ({longest} tokens) and EOS"))
    problems += arm_problems(plan, task)
    problems += option_problems(plan)
    if not problems:
        problems += random_problems(plan) or control_problems(plan)
    if plan.lora is not None and not problems:
        problems += lora_problems(plan)
    if plan.gradient_checkpointing and not problems:
        problems += checkpointing_problems(plan)
    if plan.hypotheses is not None and not problems:
        problems += hypothesis_problems(plan)
    return problems


def agent_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """An agent section names registered tools once each, budgets only for them, and goes
    with what runs episodes: a policy postlab builds (a pretrained chat model's template has
    no tool turns), and no dynamic sampling (an update must read the rollout's batch as
    sampled, for its log-probabilities to be the rollout's bit for bit)."""
    from postlab.tasks.tools import TOOLS, tool_for

    section = plan.agent
    problems: list[tuple[str, str]] = []
    for index, name in enumerate(section.tools):
        try:
            tool_for(name)
        except KeyError as unknown:
            problems.append((f"agent.tools.{index}", str(unknown.args[0])))
    if len(set(section.tools)) != len(section.tools):
        problems.append(("agent.tools", "names a tool twice"))
    for name in section.tool_budgets or {}:
        if name not in section.tools:
            problems.append((f"agent.tool_budgets.{name}",
                             f"{name!r} is not one of the agent's tools "
                             f"({', '.join(section.tools)})" if name in TOOLS else
                             f"unknown tool {name!r}"))
    if section.calls < 1:
        problems.append(("agent.calls", "SFT demonstrates a call: allow at least one"))
    if section.calls >= 1 and section.turns < 2:
        problems.append(("agent.turns", "a call and an answer take two turns at least"))
    if policy_kind(plan) == "pretrained":
        problems.append(("agent", "a pretrained chat policy's template has no tool turns; "
                                  "use the gru or transformer policy"))
    if plan.dynamic_sampling is not None:
        problems.append(("dynamic_sampling", "episodes are trained on the batch as it was "
                                             "sampled; dynamic sampling would reshape it"))
    return problems


def arm_problems(plan: PlanModel, task: Any) -> list[tuple[str, str]]:
    """Each arm names a stage, a pipeline with what it takes, and a contract that reads the
    task's kind of answer."""
    from postlab.plan.arms import parse_arm

    problems: list[tuple[str, str]] = []
    names = []
    for index, entry in enumerate(plan.arms):
        arm = parse_arm(entry)
        if isinstance(entry, str) and not re.match(NAME_PATTERN, entry):
            problems.append((f"arms.{index}", f"{entry!r} cannot name a stage"))
        names.append(arm.name)
        where = f"arms.{index}"
        if arm.contract is not None and arm.contract not in CONTRACTS:
            problems.append((where, f"unknown reward contract {arm.contract!r}; known: "
                                    f"{', '.join(CONTRACTS.names())}"))
        elif arm.contract is not None and not fits(arm.contract, task.answer_kind):
            fitting = [n for n in CONTRACTS.names() if fits(n, task.answer_kind)]
            problems.append((where, f"the contract {arm.contract!r} judges "
                                    f"{contract_answers(arm.contract)} answers; the task "
                                    f"{task.name}'s are {task.answer_kind} answers (its "
                                    f"contracts: {', '.join(fitting)})"))
        if arm.pipeline == "sft-only" and (arm.contract is not None or arm.sft_steps is None):
            problems.append((where, "an sft-only arm takes sft_steps and no contract"))
        if arm.pipeline == "sft-selected" and (arm.contract is not None or
                                               arm.sft_steps is not None):
            problems.append((where, "an sft-selected arm takes a selection, no contract and "
                                    "no sft_steps (it trains the plan's sft_steps)"))
        if (arm.pipeline == "sft-selected") != (arm.selection is not None):
            problems.append((where, "a selection goes with the sft-selected pipeline, and "
                                    "that pipeline needs one"))
        elif arm.selection is not None and arm.selection not in SELECTIONS:
            problems.append((f"{where}.selection", f"unknown selection {arm.selection!r}; "
                                                   f"known: {', '.join(SELECTIONS.names())}"))
        if arm.is_rl and (arm.contract is None or arm.sft_steps is not None):
            problems.append((where, "an RL arm takes a contract and no sft_steps"))
    if len(set(names)) != len(names) or "initial" in names:
        problems.append(("arms", "arm names must be distinct and not 'initial'"))
    return problems


def option_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """Each RL option names a registered entry ("did you mean"), and a loss's parameters go
    with that loss."""
    problems = []
    for field in ("loss_reduction", "advantage", "kl", "policy_loss"):
        stated = getattr(plan, field)
        name = TEACHING_ALIASES[field].get(stated, stated)
        if name not in REGISTRIES[field]:
            known = REGISTRIES[field].names()
            close = difflib.get_close_matches(str(stated), known, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            problems.append((field, f"unknown option {stated!r}{guess}; known: "
                                    f"{', '.join(known)}"))
    for field in ("sapo_tau_pos", "sapo_tau_neg"):
        if getattr(plan, field) is not None and plan.policy_loss != "sapo":
            problems.append((field, f"only the sapo policy loss reads it; this plan's is "
                                    f"{plan.policy_loss!r}"))
    return problems


def kinds_with(capability: str) -> str:
    """The registered policy kinds that offer ``capability`` (a field of their PolicyKind),
    for a refusal that says where to go instead."""
    return ", ".join(name for name in POLICIES.names() if getattr(POLICIES[name], capability))


def checkpointing_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """Gradient checkpointing needs a kind whose blocks postlab runs itself."""
    kind = policy_kind(plan)
    check = POLICIES[kind].checkpointing
    if check is None:
        return [("gradient_checkpointing", f"the {kind} policy has no blocks to checkpoint "
                                           f"(policies that do: {kinds_with('checkpointing')})")]
    problem = check(plan)
    return [] if problem is None else [("gradient_checkpointing", problem)]


def control_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """A control is one of the plan's arms, and there is another to compare with it."""
    from postlab.plan.arms import arm_names

    if plan.control is None:
        return []
    names = arm_names(plan)
    if plan.control not in names:
        return [("control", f"{plan.control!r} is not one of the plan's arms "
                            f"({', '.join(names)})")]
    if len(names) < 2:
        return [("control", "a control needs another arm to be compared with")]
    return []


def random_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """An arm paid at random needs its rate stated, and the rate needs such an arm; dynamic
    sampling is refused with it (the payments are keyed by a row's place in the step's
    batch, and a resampled group has no place of its own)."""
    from postlab.plan.arms import arm_specs

    drawn = [arm.contract for arm in arm_specs(plan) if arm.contract in DRAWN]
    if drawn and plan.random_rate is None:
        return [("random_rate", f"the {drawn[0]} contract pays at a stated rate: set "
                                "random_rate, between 0 and 1 (0.5 pays half the rows)")]
    if not drawn and plan.random_rate is not None:
        return [("random_rate", "only the random contract reads it, and no arm trains on it")]
    if drawn and plan.dynamic_sampling is not None:
        return [("dynamic_sampling", "cannot resample an arm paid by the random contract "
                                     "(its payments are keyed by each row's place in the "
                                     "step's batch)")]
    return []


def lora_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """Adapters need a kind that takes them, layers of that model, an RL arm, and peft."""
    from postlab.plan.arms import arm_specs

    kind = policy_kind(plan)
    targets_of = POLICIES[kind].adapter_targets
    if targets_of is None:
        return [("lora", f"the {kind} policy takes no adapters (policies that do: "
                         f"{kinds_with('adapter_targets')})")]
    if not any(arm.is_rl for arm in arm_specs(plan)):
        return [("lora", "no arm trains with RL, and only RL arms train adapters")]
    require_peft()
    section = lora_section(plan)
    assert section is not None
    return [("lora.target_modules", problem)
            for problem in target_problems(section, targets_of(plan))]


def hypothesis_problems(plan: PlanModel) -> list[tuple[str, str]]:
    """Each hypothesis must name what the plan has, and be able to come out both ways."""
    from postlab.plan.arms import arm_names, plan_contracts
    from postlab.plan.hypotheses import METRICS, can_decide

    problems: list[tuple[str, str]] = []
    stages = ["initial", *arm_names(plan)]
    splits = list(plan.split)
    contracts = plan_contracts(plan)
    seen: set[str] = set()
    for index, hypothesis in enumerate(plan.hypotheses.tests):
        where = f"hypotheses.tests.{index}"
        if hypothesis.id in seen:
            problems.append((f"{where}.id", f"{hypothesis.id!r} is used twice"))
        seen.add(hypothesis.id)
        metric = hypothesis.metric
        if metric not in METRICS:
            problems.append((f"{where}.metric", f"unknown metric {metric!r}; known: "
                                                f"{', '.join(METRICS.names())}"))
            continue
        spec = METRICS[metric]
        if hypothesis.decoding is not None and not spec.takes_decoding:
            problems.append((f"{where}.decoding", f"{metric} is of sampled answers only"))
        contract = hypothesis.contract
        if spec.takes_contract and contract not in contracts:
            problems.append((f"{where}.contract", f"{contract!r} is not one of the plan's "
                                                  f"contracts ({', '.join(contracts)})"))
        if contract is not None and not spec.takes_contract:
            problems.append((f"{where}.contract", f"{metric} takes no contract"))
        k = hypothesis.k
        if spec.takes_k and (k is None or k > plan.eval_samples):
            problems.append((f"{where}.k", f"pass_at_k needs k from 1 to eval_samples "
                                           f"({plan.eval_samples}), got {k}"))
        if k is not None and not spec.takes_k:
            problems.append((f"{where}.k", f"{metric} takes no k"))
        if metric == "hacking_gap" and len(contracts) < 2:
            problems.append((f"{where}.metric", "the hacking gap needs a second contract"))
        compare = hypothesis.compare
        for key, known in (("stage", stages), ("versus_stage", stages), ("split", splits),
                           ("versus_split", splits)):
            value = getattr(compare, key)
            if value is not None and value not in known:
                problems.append((f"{where}.compare.{key}", f"unknown {key.split('_')[-1]} "
                                                           f"{value!r}; the plan has "
                                                           f"{', '.join(known)}"))
        versus = [key for key in ("versus_stage", "versus_split") if getattr(compare, key)]
        if len(versus) != 1:
            problems.append((f"{where}.compare", "give exactly one of versus_stage and "
                                                 "versus_split"))
        elif getattr(compare, versus[0]) == getattr(compare, versus[0].removeprefix("versus_")):
            problems.append((f"{where}.compare", "compares a place with itself"))
        why = can_decide(metric, hypothesis.margin, len(plan.seeds))
        if why is not None:
            problems.append((f"{where}.margin" if "margin" in why else "seeds", why))
    return problems


def validate_plan(data: Any) -> list[tuple[str, str]]:
    """Every problem of a plan as (field path, message); empty when the plan is valid."""
    if not isinstance(data, dict):
        return [("plan", "must be a JSON object")]
    try:
        plan = PlanModel.of(data)
    except ValidationError as exc:
        return [(field_path(err["loc"]), err["msg"]) for err in exc.errors()]
    return cross_field_problems(plan)

