"""Words of the report figures in each language: titles, axis labels with units, captions.

Apart from :mod:`postlab.render.labels` because only the figures (and the check for a CJK
font) read them, and they do not change with :func:`~postlab.render.labels.starting_words`.
"""

from __future__ import annotations

#: Words of the figures: titles, axis labels with units, and the captions that say how each
#: figure was drawn.
FIGURE_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "share_answers": "share of answers (0–1)",
        "share_outputs": "share (0–1)",
        "share_questions": "share of questions (0–1)",
        "gap_axis": "difference of shares: lenient minus reference",
        "fig_outcomes_caption": "Bars: mean over seeds; whiskers: 95% interval ({method}); "
                                "dots: each seed.",
        "fig_generalisation": "Training reward against success on train and held-out pairs",
        "fig_generalisation_caption": "Training reward: share of the last tenth of RL steps' "
                                      "rollouts the arm's own contract paid; success: sampled "
                                      "answers right under the {contract} contract. Whiskers: "
                                      "95% interval; dots: each seed.",
        "training_reward": "training reward (own contract)",
        "training_right": "training rollouts right",
        "split_success": "{split} pairs: sampled success",
        "fig_heatmap": "Sampled success by operand pair, per stage and split",
        "fig_heatmap_caption": "Each cell: share of one pair's sampled answers right under the "
                               "{contract} contract, pooled over seeds; white: none right "
                               "(exactly 0, apart from the darkest shade, which is any share "
                               "above it); grey: pair not in that split.",
        "operand_a": "first operand a", "operand_b": "second operand b",
        "fig_gap_caption": "Sampled acceptance under the lenient contract minus success "
                           "under the reference, a difference; whiskers: 95% interval "
                           "(over seeds and questions, paired by question); dots: each seed.",
        "fig_pass_caption": "Lines: mean over seeds; band: 95% interval; faint lines: each "
                            "seed.",
        "fig_dynamics_caption": "Bold: moving average over {window} steps of the mean over "
                                "seeds; faint: the raw per-step mean; band: lowest to highest "
                                "seed.",
        "fig_sft_caption": "Bold: moving average over {window} steps; faint: the raw mean "
                           "over seeds; band: lowest to highest seed.",
        "pass_axis": "pass@k (share of questions, 0–1)",
        "sft_axis": "cross-entropy (nats per token, log scale)",
        "units_reward": "share of rollouts", "units_groups": "groups per step",
        "units_nats": "nats per token", "units_share_tokens": "share of tokens",
        "units_norm": "L2 norm", "units_loss": "objective per token",
        "units_tokens": "tokens per answer", "units_share_rollouts": "share of rollouts",
        "cjk_missing": "Chinese figure labels need a CJK font (for example the Noto Sans CJK "
                       "fonts); none is installed here and postlab's own subset is missing, "
                       "so the figures are labelled in English.",
    },
    "zh": {
        "share_answers": "回答比例（0–1）",
        "share_outputs": "比例（0–1）",
        "share_questions": "问题比例（0–1）",
        "gap_axis": "比例之差：宽松契约减参考契约",
        "fig_outcomes_caption": "柱：种子均值；误差线：95% 区间（{method}）；点：各种子。",
        "fig_generalisation": "训练奖励与训练/留出组合上的正确率",
        "fig_generalisation_caption": "训练奖励：RL 最后十分之一步的采样中被本组契约奖励的比例；"
                                      "正确率：按{contract}契约判定正确的采样回答比例。误差线："
                                      "95% 区间；点：各种子。",
        "training_reward": "训练奖励（本组契约）",
        "training_right": "训练采样正确",
        "split_success": "{split} 组合：采样正确率",
        "fig_heatmap": "各阶段、各划分按操作数对的采样正确率",
        "fig_heatmap_caption": "每格：该组合的采样回答按{contract}契约判定正确的比例"
                               "（合并各种子）；白色：没有一个正确（恰为 0，与最深的颜色区分，"
                               "后者是大于 0 的比例）；灰色：该组合不在此划分中。",
        "operand_a": "第一个操作数 a", "operand_b": "第二个操作数 b",
        "fig_gap_caption": "宽松契约下的采样接受率减参考契约下的正确率（一个差值）；误差线：95% "
                           "区间（同时计入种子与题目，按题目配对）；点：各种子。",
        "fig_pass_caption": "线：种子均值；带：95% 区间；细线：各种子。",
        "fig_dynamics_caption": "粗线：种子均值的 {window} 步滑动平均；细线：逐步原始均值；"
                                "带：最低到最高种子。",
        "fig_sft_caption": "粗线：{window} 步滑动平均；细线：种子原始均值；带：最低到最高种子。",
        "pass_axis": "pass@k（问题比例，0–1）",
        "sft_axis": "交叉熵（每词元奈特，对数坐标）",
        "units_reward": "采样比例", "units_groups": "每步组数",
        "units_nats": "每词元奈特", "units_share_tokens": "词元比例",
        "units_norm": "L2 范数", "units_loss": "每词元目标值",
        "units_tokens": "每个回答的词元数", "units_share_rollouts": "采样比例",
        # in English too: where no CJK font can be found, Chinese may not display either
        "cjk_missing": "中文图注需要 CJK 字体（例如 Noto Sans CJK），此处未安装，"
                       "图中标注使用英文。(No CJK font here, not even postlab's own: the "
                       "figures are labelled in English.)",
    },
}
