"""Words of the reports in each language, kept apart from layout and from numbers.

Words about a particular contract are not here: each contract registers its own
(:data:`postlab.tasks.contracts.CONTRACT_WORDS`), and :func:`metric_label` looks them up.
"""

from __future__ import annotations

from postlab.tasks.contracts import CONTRACTS, describe

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "postlab report",
        "run": "Run", "plan_sha256": "plan sha256", "seeds": "seeds",
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
        "hypotheses": "Preregistered hypotheses (decided by the plan's rule; Holm across them)",
        "hypothesis": "id", "statement": "hypothesis", "claim": "claim",
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
        "hypotheses": "预注册假设（按计划中的规则判定；多重比较用 Holm 校正）",
        "hypothesis": "编号", "statement": "假设", "claim": "主张",
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
