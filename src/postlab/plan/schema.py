"""The plan schema: every field typed, range-checked and documented; unknown fields refused.

Validation has two layers. The pydantic model here checks each field on its own (types,
ranges) and gives the JSON Schema (``postlab plan schema``);
:func:`~postlab.plan.validation.cross_field_problems` then checks what depends on several
fields, and :func:`~postlab.plan.validation.validate_plan` returns every problem of both
layers with its field path.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from postlab.plan.arms import PIPELINES
from postlab.plan.margins import default
from postlab.policies import POLICIES
from postlab.policies.lora import LoraSection
from postlab.rl.algorithms import REGISTRIES, TEACHING_ALIASES
from postlab.tasks.contracts import CONTRACTS
from postlab.tasks.registry import TASKS
from postlab.tasks.selection import DESCRIPTIONS as SELECTION_WORDS
from postlab.tasks.tools import TOOLS


def _options(field: str) -> str:
    registry = REGISTRIES[field]
    lines = [f"`{name}`: {registry[name].summary} ({registry[name].source})"
             for name in registry.names()]
    aliases = "; ".join(f"the teaching plan's words {text!r} mean `{name}`"
                        for text, name in TEACHING_ALIASES[field].items())
    return " One of: " + "; ".join(lines) + f". Also accepted: {aliases}."


_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
Pair = Annotated[list[int], Field(min_length=2, max_length=2)]
#: Seeds plus the stream offsets (up to seed + 5000 and seed + 4000 + splits) must stay
#: within the 64-bit range torch's generators accept.
Seed = Annotated[int, Field(ge=0, le=2**62)]
#: Stage and split names become file names and report labels.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class PlanParent(BaseModel):
    """Where a derived plan came from."""

    model_config = _STRICT
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the parent plan file")
    changes: list[str] = Field(min_length=1, description="keys changed from the parent")


class ArmSpec(BaseModel):
    """An arm given as an object: a pipeline, and the contract RL trains on."""

    model_config = _STRICT
    name: Name = Field(description="stage name in the record, reports and checkpoint file "
                                   "names: letters, digits, '_', '.', '-'")
    pipeline: Literal["sft-then-rl", "rl-only", "sft-only", "sft-selected"] = Field(
        description="; ".join(f"`{k}`: {v}" for k, v in PIPELINES.items())
        + " (compare them at matched compute: answer 9)")
    contract: str | None = Field(None, description="reward contract RL trains on (RL "
                                                   "pipelines only)")
    sft_steps: int | None = Field(None, ge=1, le=1_000_000,
                                  description="extra SFT steps (sft-only pipeline only)")
    selection: str | None = Field(None, description=(
        "how an sft-selected arm chooses its demonstrations (sft-selected only): "
        + "; ".join(f"`{k}`: {v}" for k, v in SELECTION_WORDS.items())))


class DynamicSampling(BaseModel):
    """DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476)."""

    model_config = _STRICT
    max_extra_groups: int = Field(ge=1, le=10_000, description=(
        "per RL step, at most this many extra groups are drawn to replace groups whose "
        "rewards are all equal (they carry no signal); what was drawn, kept and dropped is "
        "recorded per step"))
    constant_groups: Literal["keep", "drop"] = Field("keep", description=(
        "groups whose rewards are all equal that the extra groups could not replace: `keep` "
        "them in the update (their advantages are 0, but their tokens count in the loss's "
        "denominators and the KL term; what dynamic sampling did before this option), or "
        "`drop` them from it, as DAPO defines dynamic sampling: the update sees only groups "
        "with signal, and a step left with none makes no update. Either way the step's rows "
        "keep every group, and zero_variance_groups counts those left out"))


class HackingMonitor(BaseModel):
    """The online rule that marks when reward hacking starts (``postlab.analysis.onset``):
    calibrated for a false-alarm probability, or stated as a drift and a threshold."""

    model_config = _STRICT
    false_alarm: float | None = Field(None, gt=0, lt=0.5, description=(
        "probability that the rule raises an alarm in a seed's arm over the plan's RL steps "
        "when nothing is gamed (each step's gap binomial at the plan's batch, at "
        "tolerated_gap); the drift and threshold are chosen for it when the plan is checked "
        f"(absent: {default('hacking_monitor.false_alarm')}, unless drift or threshold is "
        "stated)"))
    tolerated_gap: float | None = Field(None, gt=0, lt=1, description=(
        "per-step gap (share of rollouts the trained contract pays and the strictest refuses) "
        f"that is no gaming (absent: {default('hacking_monitor.tolerated_gap')})"))
    detect_gap: float | None = Field(None, gt=0, lt=1, description=(
        "gap the rule is built to find quickly; with tolerated_gap it sets the allowance, "
        "their binomial likelihood ratio's (absent: "
        f"{default('hacking_monitor.detect_gap')})"))
    drift: float | None = Field(None, ge=0, le=1, description=(
        "a stated rule instead of a calibrated one: the per-step gap tolerated as noise, the "
        "CUSUM adds gap - drift each step (absent with a threshold stated: "
        f"{default('hacking_monitor.drift')})"))
    threshold: float | None = Field(None, gt=0, le=1000, description=(
        "a stated rule: the CUSUM statistic above which the alarm is raised; the onset is "
        "the first step of the excursion that raised it (absent with a drift stated: "
        f"{default('hacking_monitor.threshold')})"))


class HypothesisCompare(BaseModel):
    """What a hypothesis compares, paired by seed: a stage against another stage on one split,
    or one split against another for one stage."""

    model_config = _STRICT
    stage: Name = Field(description="`initial` (the SFT model) or an arm's name")
    split: Name = Field(description="a split of the plan")
    versus_stage: Name | None = Field(None, description="the stage compared against (same "
                                                         "split)")
    versus_split: Name | None = Field(None, description="the split compared against (same "
                                                         "stage)")


class Hypothesis(BaseModel):
    """A question decided before training: one metric, one paired comparison, a direction and
    a margin; the decision rule is the plan's (see `hypotheses`)."""

    model_config = _STRICT
    id: Name = Field(description="short name, unique in the plan")
    statement: str = Field(min_length=1, max_length=500, description="the hypothesis in words")
    metric: str = Field(description="a registered metric (`postlab plan schema` lists them: "
                                    "success, rate, coverage, pass_at_k, hacking_gap)")
    decoding: Literal["greedy", "sampled"] | None = Field(None, description=(
        "for success and rate: greedy or sampled answers (absent: sampled)"))
    contract: str | None = Field(None, description="for rate: the contract")
    k: int | None = Field(None, ge=1, le=10_000, description="for pass_at_k: k, at most "
                                                             "eval_samples")
    compare: HypothesisCompare
    direction: Literal["increase", "decrease"] = Field(description=(
        "the claim: value(stage, split) minus value(versus) is above +margin (increase) or "
        "below -margin (decrease)"))
    margin: float = Field(ge=0, le=10, description="how far beyond zero the difference must be")


class Hypotheses(BaseModel):
    """Preregistered hypotheses and their family-wise error rate."""

    model_config = _STRICT
    alpha: float = Field(default("hypotheses.alpha"), gt=0, lt=0.5, description=(
        "family-wise error rate: each hypothesis is decided by a one-sided Student t bound on "
        "the mean paired difference over seeds at the level Holm's step-down procedure gives "
        "it; confirmed when the bound clears the margin, refuted when the opposite bound falls "
        "short of it, inconclusive otherwise"))
    tests: list[Hypothesis] = Field(min_length=1, max_length=100)


class GymSection(BaseModel):
    """A reasoning-gym dataset as a task: what generates its items and what pins them."""

    model_config = _STRICT
    dataset: str = Field(min_length=1, max_length=100, description=(
        "a reasoning-gym dataset name (chain_sum, basic_arithmetic, countdown, ...)"))
    config: dict[str, Any] = Field(default_factory=dict, description=(
        "the dataset's configuration as reasoning-gym takes it (difficulty settings such as "
        "min_terms, max_digits); checked by the library"))
    seed: int = Field(ge=0, le=2**31 - 1, description="the generator seed")
    sizes: dict[Name, Annotated[int, Field(ge=1, le=100_000)]] = Field(
        min_length=1, description="distinct questions per split, in split order")
    answer_format: Literal["tagged", "final-number"] | None = Field(None, description=(
        "how answers are written and judged: `tagged` (absent means this) demonstrates "
        "<answer>ANSWER</answer> and judges it with rg-strict; `final-number` demonstrates the "
        "bare answer and judges the output's last number with rg-final (a chat model that "
        "answers in a sentence; plain-number answers only)"))
    version: str | None = Field(None, pattern=r"^[0-9][0-9A-Za-z.+-]{0,40}$", description=(
        "the reasoning-gym version that generated the items (written by freeze)"))
    items_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description=(
        "sha256 of the generated items (written by freeze); a run regenerates them and "
        "refuses a plan whose items differ"))


class AgentSection(BaseModel):
    """The task asked as an agent's episodes: tools the policy may call, and the budgets
    that end an episode (``postlab.tasks.agent``)."""

    model_config = _STRICT
    tools: list[str] = Field(min_length=1, max_length=4, description=(
        "registered tools, called as `<name>argument</name>` at a turn's end: "
        + ", ".join(f"`{name}`" for name in TOOLS.names())
        + "; SFT demonstrates one call of the first"))
    turns: int = Field(ge=1, le=8, description=(
        "the most turns an episode takes; each turn writes at most max_new_tokens tokens"))
    calls: int = Field(ge=0, le=8, description=(
        "the most tool calls an episode makes; a call past it ends the episode unanswered"))
    tool_budgets: dict[str, Annotated[int, Field(ge=1, le=8)]] | None = Field(
        None, description=("a tool's own budget per episode, by name (the checker's "
                           "limits querying it until something passes); a call past it is "
                           "answered `error`"))


class TokenizerSection(BaseModel):
    """How text becomes tokens, when not one token per character of ``vocab``."""

    model_config = _STRICT
    kind: Literal["bpe"] = Field(description=(
        "`bpe`: a byte-level BPE (Hugging Face tokenizers) trained on the prompts and "
        "demonstrations of the train split, with pad and eos as its special tokens; the same "
        "plan gives the same tokenizer bytes, kept in the run folder as tokenizer.json"))
    vocab_size: int = Field(ge=258, le=65_536, description=(
        "the BPE's largest vocabulary: 256 bytes, pad and eos, then merges (a small corpus "
        "may stop earlier)"))


class PolicySection(BaseModel):
    """Which policy answers, and its own fields; the kind validates the fields it takes."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    kind: str = Field(description="registered policy kind: " + ", ".join(
        f"`{name}`: {POLICIES[name].summary}" for name in POLICIES.names()))


class PlanModel(BaseModel):
    """A frozen experiment plan. Fields absent from the teaching plan default to its choices."""

    model_config = _STRICT

    version: int = Field(ge=1, description="plan version; `freeze --from` increments it")
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="date frozen, YYYY-MM-DD")
    task: str = Field(description="registered task: " + ", ".join(TASKS.names()))
    operand_digits: int | None = Field(None, ge=2, le=3, description=(
        "operand width of `multi_digit_addition` (default 2)"))
    reasoning_gym: GymSection | None = Field(None, description=(
        "the `reasoning_gym` task's dataset, its configuration and the pins that freeze "
        "writes (absent for the arithmetic tasks)"))
    agent: AgentSection | None = Field(None, description=(
        "ask the task as an agent's episodes: the policy may call tools over several turns, "
        "and arms train on the episode contracts (absent: one answer per question)"))
    split: dict[Name, list[Pair]] = Field(description=(
        "named lists of questions: operand pairs for the arithmetic tasks, [0, item] for "
        "`reasoning_gym` (written by `postlab freeze --draft`); `train` and `test` are "
        "required, and no unordered pair "
        "may appear in two splits (answer 6)"))
    seeds: list[Seed] = Field(min_length=1, description="distinct seeds in 0..2**62; one full "
                                                         "run each")
    vocab: str = Field(min_length=2, description="characters of the model, each once")
    eos: str = Field(min_length=1, max_length=1, description="end-of-answer character")
    pad: str = Field(min_length=1, max_length=1, description="padding character")
    embedding: int = Field(ge=1, le=4096, description="embedding width of the `gru` policy")
    hidden: int = Field(ge=1, le=4096, description="hidden width of the `gru` policy")
    policy: PolicySection | None = Field(None, description=(
        "the policy: `{\"kind\": name, ...its fields}`; absent means the `gru` policy with "
        "the top-level vocab, eos, pad, embedding and hidden, as in the teaching plan"))
    tokenizer: TokenizerSection | None = Field(None, description=(
        "absent: one token per character of `vocab` (the teaching plan); or a BPE trained on "
        "the plan's training questions"))
    lora: LoraSection | None = Field(None, description=(
        "LoRA adapters (peft) for the RL arms of a transformer or pretrained policy: each RL "
        "arm trains adapters on its start weights, which stay frozen, and its KL reference is "
        "the same network with the adapters off; SFT trains every weight (absent: RL trains "
        "every weight, as in the teaching plan)"))
    threads: int = Field(ge=1, le=256, description="torch threads per worker process")
    precision: Literal["float32", "bf16"] | None = Field(None, description=(
        "what forward passes compute in: `float32` (absent means this, as in the teaching "
        "plan) or `bf16`, bfloat16 autocast on the run's device with float32 weights and "
        "optimizer; recorded as the record's `numerics.dtype`"))
    gradient_checkpointing: bool | None = Field(None, description=(
        "transformer and pretrained (GPT-2 or Llama) policies: each block keeps only its "
        "input for the backward pass and runs again there (activation checkpointing), so an "
        "update holds one block's activations at a time instead of every block's, for one "
        "more forward pass of the policy; the same bits as without it (tested). Absent or "
        "false: off, as in the teaching plan; the exact engine only"))
    sft_steps: int = Field(ge=0, le=1_000_000, description=(
        "supervised steps (0: the seed's initial stage is its starting model, a pretrained "
        "model's baseline)"))
    sft_batch: int = Field(ge=1, le=100_000, description="pairs per supervised step")
    sft_lr: float = Field(gt=0, le=10, description="Adam learning rate for SFT")
    rl_steps: int = Field(ge=1, le=1_000_000, description="RL steps per arm")
    prompts_per_step: int = Field(ge=1, le=100_000, description="questions per RL step")
    group_size: int = Field(ge=2, le=10_000, description="sampled answers per question; "
                                                          "advantages are computed per group")
    updates_per_rollout: int = Field(ge=1, le=1000, description="gradient steps per rollout")
    rl_lr: float = Field(gt=0, le=10, description="Adam learning rate for RL")
    clip: float = Field(gt=0, lt=1, description=(
        "PPO clip range: ratios are clipped to [1-clip, 1+clip] (Schulman et al. 2017); the "
        "lower bound when `clip_high` is set"))
    clip_high: float | None = Field(None, gt=0, lt=1, description=(
        "upper clip bound, 1+clip_high (clip-higher, DAPO: Yu et al. 2025, arXiv:2503.14476, "
        "e.g. 0.28 with clip 0.2); absent means symmetric"))
    kl_beta: float = Field(ge=0, le=100, description="weight of the KL penalty to the reference")
    max_new_tokens: int = Field(ge=1, le=256, description=(
        "token budget per answer; must cover the task's longest answer plus EOS"))
    temperature: float = Field(ge=0.01, le=100, description=(
        "sampling temperature, 0.01 to 100: logits are divided by it in float32, where a "
        "tiny temperature rounds to zero and makes the sampling probabilities NaN; 0.01 "
        "already samples all but greedily"))
    eval_samples: int = Field(ge=1, le=10_000, description="sampled answers per held-out "
                                                           "question (coverage, pass@k)")
    gradient_clip: float = Field(gt=0, le=1e6, description="gradient-norm clip")
    arms: list[str | ArmSpec] = Field(min_length=1, description=(
        "RL arms: a contract name means SFT then RL under that contract; an object names a "
        "pipeline. Contracts: " + ", ".join(CONTRACTS.names())))
    loss_reduction: str = Field(description="how per-token losses become one number."
                                + _options("loss_reduction"))
    advantage: str = Field(description="advantage estimator." + _options("advantage"))
    kl: str = Field(description="KL estimator." + _options("kl"))
    policy_loss: str = Field("ppo-clip", description=(
        "the policy loss of each RL update (absent: `ppo-clip`, the teaching plan's); "
        "ppo-clip, gspo and cispo clip with `clip` and `clip_high` (sapo records the share of "
        "ratios outside them), and the plan's `loss_reduction` reduces every one."
        + _options("policy_loss")))
    sapo_tau_pos: float | None = Field(None, gt=0, le=100, description=(
        "SAPO's gate temperature for tokens of positive advantage (absent: 1.0, the paper's); "
        "only the `sapo` policy loss reads it"))
    sapo_tau_neg: float | None = Field(None, gt=0, le=100, description=(
        "SAPO's gate temperature for tokens of zero or negative advantage (absent: 1.05, the "
        "paper's); only the `sapo` policy loss reads it"))
    random_rate: float | None = Field(None, gt=0, lt=1, description=(
        "the chance that the `random` contract pays a rollout row, drawn from the run's own "
        "random stream whatever the row says (a control arm, as in Spurious Rewards); "
        "between 0 and 1, needed by and only read by an arm on that contract"))
    dynamic_sampling: DynamicSampling | None = Field(None, description=(
        "resample groups with no signal (absent: never, as in the teaching plan)"))
    selection: str = Field(description="how the reported checkpoint is chosen (stated, so it "
                                       "cannot change after seeing results)")
    rewards: dict[str, str] = Field(description="the contracts' rules in words")
    control: str | None = Field(None, description=(
        "the arm every other arm is compared with, e.g. one trained on the `random` contract "
        "(paid at random) or the `format` one (paid for a well-formed answer whatever its "
        "value); reports give each "
        "arm's held-out change against it, paired by seed and question, and say when an "
        "arm's gain is not distinguishable from the control's (absent: no control)"))
    hacking_monitor: HackingMonitor | None = Field(None, description=(
        "one-sided CUSUM on each RL arm's per-step hacking gap (trained contract's acceptance "
        "minus the strictest contract's success): reports give the onset step per seed "
        "(absent: calibrated for a false-alarm probability of "
        f"{default('hacking_monitor.false_alarm')} per seed and arm)"))
    hypotheses: Hypotheses | None = Field(None, description=(
        "questions decided before training, part of the plan's hash; every report gives "
        "each one's verdict (absent: none, as in the teaching plan)"))
    parent: PlanParent | None = Field(None, description="set by `freeze --from`: the parent "
                                                        "plan's sha256 and the changed keys")

    #: The JSON object the plan was read from, in its file's key order: checkpoints and
    #: digests hold the plan as written, which the typed fields alone cannot give back.
    _data: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def of(cls, data: dict[str, Any]) -> PlanModel:
        """The typed plan of a plan's JSON object, whose fields are valid (see
        :func:`~postlab.plan.validation.validate_plan` for every check); it keeps the object
        for :meth:`data`."""
        plan = cls.model_validate(data)
        plan._data = copy.deepcopy(data)
        return plan

    def data(self) -> dict[str, Any]:
        """The plan as its file holds it (a copy): what is hashed, saved and written."""
        return copy.deepcopy(self._data) if self._data else \
            self.model_dump(mode="json", exclude_unset=True)

    def replace(self, **changes: Any) -> PlanModel:
        """This plan with ``changes`` (field: value) applied, typed afresh; the file's key
        order is kept and new keys go last."""
        return PlanModel.of({**self.data(), **changes})


#: The typed plan every layer above ``postlab.plan`` reads (attributes, validated once).
Plan = PlanModel


def field_path(loc: tuple) -> str:
    """A validation error's location as the plan's dotted field path."""
    return ".".join(str(part) for part in loc) or "plan"


def section_data(section: BaseModel) -> dict[str, Any]:
    """A typed plan section as its file held it: the fields it gave, none it left out (what a
    hash of the section's content reads)."""
    return section.model_dump(mode="json", exclude_unset=True)


def json_schema() -> dict[str, Any]:
    schema = PlanModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "postlab plan"
    return schema
