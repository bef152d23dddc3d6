"""Words of the reports in each language, kept apart from layout and from numbers.

Words about a particular contract are not here: each contract registers its own
(:data:`postlab.tasks.contracts.CONTRACT_WORDS`), and :func:`metric_label` looks them up.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from postlab.tasks.contracts import CONTRACTS, describe

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Whether the report being written is of a plan with no SFT (``sft_steps`` 0), whose first
#: stage is the model it starts from (a pretrained model's baseline): its words then say "the
#: starting model" where they say "the SFT model" (:func:`starting_words`).
_STARTING: ContextVar[bool] = ContextVar("postlab_starting_words", default=False)

#: What changes in each language when the first stage is the starting model.
_START_WORDS: dict[str, tuple[tuple[str, str], ...]] = {
    "en": (("After SFT,", "Before training,"), ("the SFT model", "the starting model"),
           ("change from SFT", "change from the start"), ("KL to SFT", "KL to the start"),
           ("the SFT curve", "the starting model's curve"),
           ("the SFT it starts from", "the model it starts from")),
    "zh": (("SFT 之后，", "训练之前，"), ("SFT 模型", "起点模型"),
           ("相对 SFT 的变化", "相对起点的变化"), ("对 SFT 的 KL", "对起点的 KL"),
           ("含其起点 SFT", "含其起点"),
           ("SFT 曲线", "起点模型的曲线")),
}
_START_STAGE = {"en": "start", "zh": "起点"}


@contextlib.contextmanager
def starting_words(plan: Plan) -> Iterator[None]:
    """Within it, reports of ``plan`` name its first stage as the plan trains it: "SFT", or,
    with no SFT steps, the starting model."""
    token = _STARTING.set(plan.sft_steps == 0)
    try:
        yield
    finally:
        _STARTING.reset(token)


class _Worded(dict[str, dict[str, str]]):
    """Words per language, read through :func:`starting_words`' setting."""

    def __getitem__(self, lang: str) -> dict[str, str]:
        words = super().__getitem__(lang)
        return _started(self._name, lang) if _STARTING.get() else words

    def __init__(self, name: str, words: dict[str, dict[str, str]]) -> None:
        super().__init__(words)
        self._name = name


@functools.cache
def _started(name: str, lang: str) -> dict[str, str]:
    table = dict.__getitem__(_TABLES[name], lang)
    changed = {}
    for key, value in table.items():
        if isinstance(value, str):
            for old, new in _START_WORDS.get(lang, ()):
                value = value.replace(old, new)
        changed[key] = value
    if name == "labels":
        changed["initial"] = _START_STAGE.get(lang, changed["initial"])
    return changed


LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "postlab report",
        "run": "Run", "plan_sha256": "plan sha256", "seeds": "seeds",
        "policy_loss": "policy loss",
        "outcomes": "Results by stage ({split} split)",
        "stage": "stage", "decoding": "decoding", "metric": "metric",
        "per_seed": "per seed", "mean_ci": "mean [95% CI]",
        "change": "change from SFT [95% CI]",
        "hacking": "Reward hacking gap: {paid} minus {right} (sampled, {split} split)",
        "gap": "gap [95% CI]",
        "pass_at_k": "pass@k on the {split} split (unbiased estimator, {contract} contract)",
        "dynamics": "Training dynamics (mean over seeds; band: lowest to highest seed)",
        "series": "series", "first_steps": "first 10% of steps", "last_steps": "last 10% of steps",
        "sft_loss": "SFT loss", "step": "step",
        "interval_method": "Intervals: {method}.",
        "greedy": "greedy", "sampled": "sampled",
        "coverage": "coverage",
        "initial": "SFT", "arm": "RL under {arm}",
        "zero_variance_groups": "zero-variance groups", "kl": "KL to SFT", "entropy": "entropy",
        "ratio_outside_clip": "ratio outside clip", "gradient_norm_before_clip":
            "gradient norm before clip", "loss": "loss", "mean_tokens": "mean tokens",
        "truncated": "truncated share",
        "compute": "Compute per seed: the stage's own / including the SFT it starts from",
        "pipeline": "pipeline", "completions": "completions", "tokens_generated":
            "tokens generated", "gradient_steps": "gradient steps",
        "examples_seen": "examples seen",
        "figures": "Figures", "fig_outcomes": "Held-out results by stage",
        "fig_gap": "Reward hacking gap by stage", "fig_pass": "pass@k by stage",
        "fig_dynamics": "Training dynamics by arm",
        "fig_onset_note": " (dotted: each seed's reward-hacking onset)", "fig_sft": "SFT loss",
        "k": "k", "rate": "rate", "no_interval": "n/a",
        "no_eos": "(no end mark)", "kind_correct": "right", "kind_gamed":
            "gamed: accepted by a lenient contract, wrong under the reference",
        "kind_wrong": "wrong, and no contract accepts it", "question": "question",
        "answer": "answer", "expected": "right answer", "accepted_by": "accepted by",
        "times": "times", "answers": "What the models answer ({split} split, sampled)",
        "answers_note": "The commonest answers of each kind, pooled over seeds; 'times' "
                        "counts them. 'postlab samples RUN' lists every answer.",
        "details": "Details", "findings": "Findings",
        "rate_method_short": "over seeds and questions (seeds x questions random effects), "
                             "logit-normal pivot or Korn-Graubard, within [0, 1]",
        "hypotheses": "Hypotheses (decided by the plan's rule; Holm within the registered "
                      "ones, and apart within the exploratory ones)",
        "hypothesis": "id", "statement": "hypothesis", "claim": "claim", "standing": "fixed",
        "standing_registered": "registered before training ({time})",
        "standing_plan": "in the plan (not registered: no time shows it preceded training)",
        "standing_exploratory": "exploratory (given after training)",
        "difference_bounds": "mean difference [one-sided bounds]", "level": "level",
        "verdict": "verdict", "verdict_confirmed": "confirmed", "verdict_refuted": "refuted",
        "verdict_inconclusive": "inconclusive",
        "onsets": "Reward-hacking onset per seed (the plan's CUSUM rule on the per-step gap)",
        "seed": "seed", "onset": "onset step", "alarm": "alarm step", "no_onset": "none",
        "late_gap": "gap, last 10% of steps", "kl_trend": "KL slope per step",
        "entropy_trend": "entropy slope per step",
        "reading": "How to read this: a stage helped on held-out pairs when its change from "
                   "SFT has an interval above zero; an arm gamed its reward when its hacking "
                   "gap is large; RL narrowed coverage when pass@k at large k fell below the "
                   "SFT curve.",
    },
    "zh": {
        "title": "postlab 报告",
        "run": "运行", "plan_sha256": "计划 sha256", "seeds": "种子",
        "policy_loss": "策略损失",
        "outcomes": "各阶段结果（{split} 划分）",
        "stage": "阶段", "decoding": "解码", "metric": "指标",
        "per_seed": "各种子", "mean_ci": "均值 [95% 区间]",
        "change": "相对 SFT 的变化 [95% 区间]",
        "hacking": "奖励投机差距：{paid}减{right}（采样，{split} 划分）",
        "gap": "差距 [95% 区间]",
        "pass_at_k": "{split} 划分上的 pass@k（无偏估计，{contract}契约）",
        "dynamics": "训练动态（种子均值；带：最低到最高种子）",
        "series": "序列", "first_steps": "前 10% 步", "last_steps": "后 10% 步",
        "sft_loss": "SFT 损失", "step": "步",
        "interval_method": "区间：{method}。",
        "greedy": "贪心", "sampled": "采样",
        "coverage": "覆盖率",
        "initial": "SFT", "arm": "RL（{arm}）",
        "zero_variance_groups": "零方差组数", "kl": "对 SFT 的 KL", "entropy": "熵",
        "ratio_outside_clip": "比值出界比例", "gradient_norm_before_clip": "裁剪前梯度范数",
        "loss": "损失", "mean_tokens": "平均词元数", "truncated": "截断比例",
        "compute": "每个种子的计算量：本阶段 / 含其起点 SFT",
        "pipeline": "流程", "completions": "生成回答数", "tokens_generated": "生成词元数",
        "gradient_steps": "梯度步数", "examples_seen": "训练样本数",
        "figures": "图", "fig_outcomes": "各阶段留出结果",
        "fig_gap": "各阶段奖励投机差距", "fig_pass": "各阶段 pass@k",
        "fig_dynamics": "各组训练动态", "fig_sft": "SFT 损失",
        "fig_onset_note": "（虚线：各种子的奖励投机起点）",
        "k": "k", "rate": "比率", "no_interval": "无",
        "no_eos": "（没有结束符）", "kind_correct": "正确",
        "kind_gamed": "投机：宽松契约接受，但按参考契约是错的",
        "kind_wrong": "错误，且没有契约接受", "question": "问题", "answer": "回答",
        "expected": "正确答案", "accepted_by": "接受它的契约", "times": "次数",
        "answers": "模型的回答（{split} 划分，采样）",
        "answers_note": "每类中最常见的回答（合并各种子），“次数”为出现次数。"
                        "“postlab samples RUN” 列出全部回答。",
        "details": "详细表格", "findings": "结论",
        "rate_method_short": "同时计入种子与题目的变异（种子×题目随机效应），"
                             "logit 正态枢轴量或 Korn-Graubard 区间，位于 [0, 1] 内",
        "hypotheses": "假设（按计划中的规则判定；预注册与探索性假设各自用 Holm 校正）",
        "hypothesis": "编号", "statement": "假设", "claim": "主张", "standing": "确定方式",
        "standing_registered": "训练前已预注册（{time}）",
        "standing_plan": "写在计划中（未注册：没有时间证明它先于训练）",
        "standing_exploratory": "探索性（训练后才给出）",
        "difference_bounds": "平均差 [单侧界]", "level": "水平",
        "verdict": "结论", "verdict_confirmed": "证实", "verdict_refuted": "否定",
        "verdict_inconclusive": "无定论",
        "onsets": "奖励投机起点（按计划中的 CUSUM 规则，逐步差距）",
        "seed": "种子", "onset": "起点步", "alarm": "报警步", "no_onset": "无",
        "late_gap": "差距（最后 10% 步）", "kl_trend": "KL 每步斜率",
        "entropy_trend": "熵每步斜率",
        "reading": "读法：相对 SFT 的变化区间高于零，说明该阶段在留出组合上有帮助；投机差距大，"
                   "说明该组钻了奖励的空子；大 k 的 pass@k 低于 SFT 曲线，说明 RL 收窄了覆盖。",
    },
}


LABELS = _Worded("labels", LABELS)


def stage_label(stage: str, lang: str) -> str:
    """'SFT' for the SFT model; 'RL under X' for an arm named after contract X; else the
    arm's own name (pipeline arms are named by the plan)."""
    words = LABELS[lang]
    if stage == "initial":
        return words["initial"]
    return words["arm"].format(arm=stage) if stage in CONTRACTS else stage


def metric_label(key: str, lang: str) -> str:
    """Words for a metric or series key: fixed ones from :data:`LABELS`; a contract's own
    (``<contract>_rate``, ``<contract>_reward``) from the words that contract registered."""
    words = LABELS[lang]
    if key in words:
        return words[key]
    contract, _, kind = key.rpartition("_")
    if kind == "rate":
        return describe(contract, lang).rate
    if kind == "reward":
        return describe(contract, lang).reward
    raise KeyError(key)


def hacking_title(contracts: tuple[str, ...], lang: str, split: str) -> str:
    """The hacking-gap heading: the second contract's acceptance minus the first's."""
    return LABELS[lang]["hacking"].format(paid=describe(contracts[1], lang).rate,
                                          right=describe(contracts[0], lang).rate, split=split)


def pass_at_k_title(contracts: tuple[str, ...], lang: str, split: str) -> str:
    return LABELS[lang]["pass_at_k"].format(contract=describe(contracts[0], lang).name,
                                            split=split)


#: Sentence templates of the findings (:mod:`postlab.analysis.findings`), per language, keyed
#: by ``key`` or ``key:direction``. Every number comes from the finding, with its interval;
#: ``{where}`` names the split (``where_held_out`` or ``where_train``).
FINDING_TEMPLATES: dict[str, dict[str, str]] = {
    "en": {
        "where_held_out": "held-out ({split})", "where_train": "training-pair (train)",
        "seeds_one": "1 seed", "seeds_many": "{n} seeds",
        "sft_result": "After SFT, answers to {where} questions are right {greedy} of the time "
                      "greedily and {sampled} when sampled; {coverage} of the questions get "
                      "at least one right answer in {samples} samples ({seeds}).",
        "arm_change:up": "{stage} raised {where} sampled success by {change} relative to the "
                         "SFT model, to {value}.",
        "arm_change:down": "{stage} lowered {where} sampled success by {change} relative to "
                           "the SFT model, to {value}.",
        "arm_change:unclear": "{stage} did not clearly change {where} sampled success: "
                              "{change} relative to the SFT model (the interval holds zero), "
                              "now {value}.",
        "arm_change:single": "{stage} changed {where} sampled success by {change} relative to "
                             "the SFT model, to {value} (one seed: no interval, no "
                             "conclusion).",
        "control_change:up": "{stage} beat the control arm ({control}) on {where} sampled "
                             "success by {change}.",
        "control_change:down": "{stage} fell below the control arm ({control}) on {where} "
                               "sampled success by {change}.",
        "control_change:unclear": "{stage}'s {where} sampled success is not distinguishable "
                                  "from the control arm's ({control}): {change} (the "
                                  "interval holds zero).",
        "control_change:single": "{stage} differs from the control arm ({control}) on {where} "
                                 "sampled success by {change} (one seed: no interval, no "
                                 "conclusion).",
        "coverage_change:up": "{stage} widened {where} coverage by {change}, to {value}.",
        "coverage_change:down": "{stage} narrowed {where} coverage by {change}, to {value}: "
                                "fewer questions get any right answer among the samples.",
        "coverage_change:unclear": "{stage} did not clearly change {where} coverage "
                                   "({change}; now {value}).",
        "coverage_change:single": "{stage} changed {where} coverage by {change}, to {value} "
                                  "(one seed: no interval).",
        "train_vs_held_out:up": "{stage} earned a training reward of {reward} ({contract} "
                                "contract, steps {first}–{last}), yet {where} success is "
                                "{held_out}: {difference} of its success on training "
                                "questions does not carry over to questions training never "
                                "asked.",
        "train_vs_held_out:down": "{stage}: {where} success {held_out} is above its training "
                                  "reward {reward} ({contract} contract, steps "
                                  "{first}–{last}) by {difference}.",
        "train_vs_held_out:unclear": "{stage}: {where} success {held_out} is not clearly "
                                     "apart from its training reward {reward} ({contract} "
                                     "contract, steps {first}–{last}); difference "
                                     "{difference}.",
        "train_vs_held_out:single": "{stage} earned a training reward of {reward} ({contract} "
                                    "contract, steps {first}–{last}); {where} success is "
                                    "{held_out} (one seed: no interval).",
        "random_vs_held_out:up": "{stage} was paid at random, {reward} of its rollouts "
                                 "(steps {first}–{last}), whatever they said; {right} of "
                                 "them were right, and its {where} success {held_out} is "
                                 "below that by {difference}.",
        "random_vs_held_out:down": "{stage} was paid at random, {reward} of its rollouts "
                                   "(steps {first}–{last}), whatever they said; {right} of "
                                   "them were right, and its {where} success {held_out} is "
                                   "above that by {difference}.",
        "random_vs_held_out:unclear": "{stage} was paid at random, {reward} of its rollouts "
                                      "(steps {first}–{last}), whatever they said; {right} "
                                      "of them were right, and its {where} success "
                                      "{held_out} is not clearly apart from that "
                                      "({difference}).",
        "random_vs_held_out:single": "{stage} was paid at random, {reward} of its rollouts "
                                     "(steps {first}–{last}), whatever they said; {right} of "
                                     "them were right; {where} success is {held_out} (one "
                                     "seed: no interval).",
        "lenient_vs_held_out:up": "{stage} was paid a training reward of {reward} by the "
                                  "{contract} contract (steps {first}–{last}), though only "
                                  "{right} of those answers were right; {where} success is "
                                  "{held_out}: {difference} of its success on training "
                                  "questions does not carry over to questions training never "
                                  "asked.",
        "lenient_vs_held_out:down": "{stage} was paid a training reward of {reward} by the "
                                    "{contract} contract (steps {first}–{last}), {right} of "
                                    "those answers right; {where} success {held_out} is "
                                    "above that by {difference}.",
        "lenient_vs_held_out:unclear": "{stage} was paid a training reward of {reward} by the "
                                       "{contract} contract (steps {first}–{last}), {right} "
                                       "of those answers right; {where} success {held_out} "
                                       "is not clearly apart from that ({difference}).",
        "lenient_vs_held_out:single": "{stage} was paid a training reward of {reward} by the "
                                      "{contract} contract (steps {first}–{last}), {right} "
                                      "of those answers right; {where} success is "
                                      "{held_out} (one seed: no interval).",
        "gaming:up": "{stage} learned to game its reward: {share} of its {where} samples are "
                     "paid by the {contract} contract yet wrong, {change} more than the SFT "
                     "model's{example}. {onsets}",
        "gaming:down": "{stage}: {share} of its {where} samples are paid by the {contract} "
                       "contract yet wrong, {change} fewer than the SFT model's{example}. "
                       "{onsets}",
        "gaming:unclear": "{stage}: {share} of its {where} samples are paid by the {contract} "
                          "contract yet wrong, not clearly more than the SFT model's "
                          "({change}){example}. {onsets}",
        "gaming:single": "{stage}: {share} of its {where} samples are paid by the {contract} "
                         "contract yet wrong ({change} relative to the SFT model; one seed: "
                         "no interval){example}. {onsets}",
        "gaming": "{stage}: {share} of its {where} samples are paid by the {contract} contract "
                  "yet wrong{example}. {onsets}",
        "example": ", for instance {prompt}{text} where {expected} is right ({count} times)",
        "share_partial": " (each counted by the fraction of a full reward it is paid)",
        "example_rollouts": "; in training rollouts, for instance {prompt}{text} where "
                            "{expected} is right",
        "onsets_found": "The per-step gap's change-point rule flagged an onset in {found} of "
                        "{seeds} seeds ({steps}).",
        "onsets_none": "The per-step gap's change-point rule flagged no onset.",
        "onset_step": "seed {seed}: step {step}", "onset_none": "seed {seed}: none",
        "onset_summary": "median step {median}, quartiles {low}–{high}, earliest {first}; "
                         "every seed's step: --format json",
        "list_separator": ", ",
        "hypothesis:confirmed": "Hypothesis {id} ({standing}) is confirmed: {statement} "
                                "(mean difference {mean:+.3f}, one-sided bounds [{low:+.3f}, "
                                "{high:+.3f}] at level {level:.4f}).",
        "hypothesis:refuted": "Hypothesis {id} ({standing}) is refuted: {statement} (mean "
                              "difference {mean:+.3f}, one-sided bounds [{low:+.3f}, "
                              "{high:+.3f}] at level {level:.4f}).",
        "hypothesis:inconclusive": "Hypothesis {id} ({standing}) is inconclusive: {statement} "
                                   "(mean difference {mean:+.3f}, one-sided bounds "
                                   "[{low:+.3f}, {high:+.3f}] at level {level:.4f}).",
        "standing_registered": "registered before training, {time}",
        "standing_plan": "in the plan, not registered",
        "standing_exploratory": "exploratory, given after training",
    },
    "zh": {
        "where_held_out": "留出（{split}）", "where_train": "训练组合（train）",
        "seeds_one": "1 个种子", "seeds_many": "{n} 个种子",
        "sft_result": "SFT 之后，{where}问题的回答在贪心解码下正确率为 {greedy}，采样下为 "
                      "{sampled}；在 {samples} 次采样中至少答对一次的问题占 {coverage}"
                      "（{seeds}）。",
        "arm_change:up": "{stage}使{where}采样正确率比 SFT 模型提高了 {change}，达到 {value}。",
        "arm_change:down": "{stage}使{where}采样正确率比 SFT 模型降低了 {change}，降至 "
                           "{value}。",
        "arm_change:unclear": "{stage}没有明显改变{where}采样正确率：相对 SFT 模型变化 "
                              "{change}（区间包含零），现为 {value}。",
        "arm_change:single": "{stage}使{where}采样正确率相对 SFT 模型变化 {change}，为 "
                             "{value}（只有一个种子：没有区间，不下结论）。",
        "control_change:up": "{stage}的{where}采样正确率比对照组（{control}）高 {change}。",
        "control_change:down": "{stage}的{where}采样正确率比对照组（{control}）低 {change}。",
        "control_change:unclear": "{stage}的{where}采样正确率与对照组（{control}）分不出高低："
                                  "{change}（区间包含零）。",
        "control_change:single": "{stage}的{where}采样正确率与对照组（{control}）相差 "
                                 "{change}（只有一个种子：没有区间，不下结论）。",
        "coverage_change:up": "{stage}使{where}覆盖率扩大了 {change}，达到 {value}。",
        "coverage_change:down": "{stage}使{where}覆盖率缩小了 {change}，降至 {value}：采样中"
                                "能答对的问题变少了。",
        "coverage_change:unclear": "{stage}没有明显改变{where}覆盖率（{change}；现为 "
                                   "{value}）。",
        "coverage_change:single": "{stage}使{where}覆盖率变化 {change}，为 {value}（只有一个"
                                  "种子：没有区间）。",
        "train_vs_held_out:up": "{stage}的训练奖励为 {reward}（{contract}契约，第 "
                                "{first}–{last} 步），而{where}正确率只有 {held_out}：它在"
                                "训练问题上的正确率中有 {difference} 没有延续到训练从未问过"
                                "的问题上。",
        "train_vs_held_out:down": "{stage}：{where}正确率 {held_out} 高于训练奖励 {reward}"
                                  "（{contract}契约，第 {first}–{last} 步），高出 "
                                  "{difference}。",
        "train_vs_held_out:unclear": "{stage}：{where}正确率 {held_out} 与训练奖励 {reward}"
                                     "（{contract}契约，第 {first}–{last} 步）没有明显差别；"
                                     "差为 {difference}。",
        "train_vs_held_out:single": "{stage}的训练奖励为 {reward}（{contract}契约，第 "
                                    "{first}–{last} 步）；{where}正确率为 {held_out}（只有"
                                    "一个种子：没有区间）。",
        "random_vs_held_out:up": "{stage}的奖励是随机支付的：第 {first}–{last} 步的 rollout "
                                 "中有 {reward} 得到支付，与内容无关；其中答对 {right}，"
                                 "{where}正确率 {held_out} 比它低 {difference}。",
        "random_vs_held_out:down": "{stage}的奖励是随机支付的：第 {first}–{last} 步的 "
                                   "rollout 中有 {reward} 得到支付，与内容无关；其中答对 "
                                   "{right}，{where}正确率 {held_out} 比它高 {difference}。",
        "random_vs_held_out:unclear": "{stage}的奖励是随机支付的：第 {first}–{last} 步的 "
                                      "rollout 中有 {reward} 得到支付，与内容无关；其中答对 "
                                      "{right}，{where}正确率 {held_out} 与之没有明显差别"
                                      "（{difference}）。",
        "random_vs_held_out:single": "{stage}的奖励是随机支付的：第 {first}–{last} 步的 "
                                     "rollout 中有 {reward} 得到支付，与内容无关；其中答对 "
                                     "{right}；{where}正确率为 {held_out}（只有一个种子：没有"
                                     "区间）。",
        "lenient_vs_held_out:up": "{stage}从{contract}契约得到的训练奖励为 {reward}（第 "
                                  "{first}–{last} 步），其中真正答对的只有 {right}；{where}"
                                  "正确率为 {held_out}：它在训练问题上的正确率中有 "
                                  "{difference} 没有延续到训练从未问过的问题上。",
        "lenient_vs_held_out:down": "{stage}从{contract}契约得到的训练奖励为 {reward}（第 "
                                    "{first}–{last} 步），其中答对 {right}；{where}正确率 "
                                    "{held_out} 比它高出 {difference}。",
        "lenient_vs_held_out:unclear": "{stage}从{contract}契约得到的训练奖励为 {reward}"
                                       "（第 {first}–{last} 步），其中答对 {right}；{where}"
                                       "正确率 {held_out} 与之没有明显差别（{difference}）。",
        "lenient_vs_held_out:single": "{stage}从{contract}契约得到的训练奖励为 {reward}"
                                      "（第 {first}–{last} 步），其中答对 {right}；{where}"
                                      "正确率为 {held_out}（只有一个种子：没有区间）。",
        "gaming:up": "{stage}学会了钻奖励的空子：它的{where}采样中有 {share} 被{contract}契约"
                     "奖励却是错的，比 SFT 模型多 {change}{example}。{onsets}",
        "gaming:down": "{stage}：它的{where}采样中有 {share} 被{contract}契约奖励却是错的，比 "
                       "SFT 模型少 {change}{example}。{onsets}",
        "gaming:unclear": "{stage}：它的{where}采样中有 {share} 被{contract}契约奖励却是错的，"
                          "没有明显多于 SFT 模型（{change}）{example}。{onsets}",
        "gaming:single": "{stage}：它的{where}采样中有 {share} 被{contract}契约奖励却是错的"
                         "（相对 SFT 模型 {change}；只有一个种子：没有区间）{example}。"
                         "{onsets}",
        "gaming": "{stage}：它的{where}采样中有 {share} 被{contract}契约奖励却是错的"
                  "{example}。{onsets}",
        "example": "，例如 {prompt}{text}，正确答案是 {expected}（出现 {count} 次）",
        "share_partial": "（每个样本按其所得的部分奖励计）",
        "example_rollouts": "；训练采样中例如 {prompt}{text}，正确答案是 {expected}",
        "onsets_found": "逐步差距的变点规则在 {seeds} 个种子中的 {found} 个发现了起点"
                        "（{steps}）。",
        "onsets_none": "逐步差距的变点规则没有发现起点。",
        "onset_step": "种子 {seed}：第 {step} 步", "onset_none": "种子 {seed}：无",
        "onset_summary": "中位数第 {median} 步，四分位 {low}–{high}，最早第 {first} 步；"
                         "每个种子的步数见 --format json",
        "list_separator": "；",
        "hypothesis:confirmed": "假设 {id}（{standing}）得到证实：{statement}（平均差 "
                                "{mean:+.3f}，单侧界 [{low:+.3f}, {high:+.3f}]，水平 "
                                "{level:.4f}）。",
        "hypothesis:refuted": "假设 {id}（{standing}）被否定：{statement}（平均差 {mean:+.3f}，"
                              "单侧界 [{low:+.3f}, {high:+.3f}]，水平 {level:.4f}）。",
        "hypothesis:inconclusive": "假设 {id}（{standing}）无定论：{statement}（平均差 "
                                   "{mean:+.3f}，单侧界 [{low:+.3f}, {high:+.3f}]，水平 "
                                   "{level:.4f}）。",
        "standing_registered": "训练前已预注册，{time}",
        "standing_plan": "写在计划中，未注册",
        "standing_exploratory": "探索性，训练后才给出",
    },
}


FINDING_TEMPLATES = _Worded("findings", FINDING_TEMPLATES)
_TABLES = {"labels": LABELS, "findings": FINDING_TEMPLATES}


def shown(text: str) -> str:
    """Text on one line: a line break shows as ⏎ (reasoning-gym prompts end with one)."""
    return text.replace("\n", "⏎")


def episode_parts(text: str) -> list[tuple[str, bool]]:
    """An answer as (text, written by the policy): an agent episode's tool outputs apart
    from its turns (their tags left off), any other answer one part."""
    from postlab.tasks.episodes import OUTPUT_CLOSE, OUTPUT_OPEN, segments

    if OUTPUT_OPEN not in text:
        return [(text, True)]
    try:
        pieces = segments(text)
    except ValueError:  # not an episode after all: shown as written
        return [(text, True)]
    return [(piece.text if piece.written
             else piece.text[len(OUTPUT_OPEN):-len(OUTPUT_CLOSE)], piece.written)
            for piece in pieces]


def shown_episode(text: str) -> str:
    """An answer on one line, a tool's output set apart as ``⟦tool: 7⟧``."""
    return "".join(shown(part) if written else f" ⟦tool: {shown(part)}⟧ "
                   for part, written in episode_parts(text))


#: Characters of a prompt that tables and sentences show; a longer one keeps its end, where
#: a question's operands sit ("…problem: 9 - 8 =").
BRIEF_PROMPT = 24


def brief(prompt: str) -> str:
    """A prompt short enough for a table cell: the whole of it, or "…" and its end, on one
    line (the full text stays in ``postlab samples``)."""
    text = prompt.rstrip("\n")
    if len(text) > BRIEF_PROMPT:
        text = "…" + text[-(BRIEF_PROMPT - 1):]
    return shown(text) + ("⏎" if prompt.endswith("\n") else "")
