"""The report's first screen: what was trained, when, on what, and whether it verified.

Everything shown is read from the plan and the record (and the verification the caller ran);
the words are in :data:`OVERVIEW_WORDS`, so both languages show the same facts.
"""

from __future__ import annotations

from typing import Any

from postlab.plan.arms import arm_specs, plan_contracts
from postlab.tasks.arithmetic import task_for

OVERVIEW_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "heading": "What was trained", "verification": "Verification",
        "findings": "Findings", "task": "task", "policy": "policy", "sft": "SFT",
        "rl": "RL", "arms": "arms", "options": "algorithm", "evaluation": "evaluation",
        "seeds": "seeds", "plan": "plan", "when": "when", "machine": "machine",
        "pairs": "{split} {n} pairs", "operands": "operands 0–{top}",
        "parameters": "{n:,} parameters",
        "sft_value": "{steps} steps × {batch} pairs, learning rate {lr:g}",
        "rl_value": "{steps} steps × {prompts} prompts × {group} samples, {updates} updates "
                    "per rollout, learning rate {lr:g}, clip {clip}, KL weight {beta:g}, "
                    "gradient clip {grad:g}, temperature {temperature:g}, at most {tokens} "
                    "new tokens",
        "arm_value": "{name}: {pipeline}",
        "pipeline_sft-then-rl": "SFT then RL on the {contract} contract",
        "pipeline_rl-only": "RL only (from the untrained model) on the {contract} contract",
        "pipeline_sft-only": "SFT only ({steps} more steps)",
        "evaluation_value": "greedy and {samples} samples per question; judged by {contracts}",
        "plan_value": "version {version}, frozen {date}, sha256 {sha}",
        "when_value": "plan frozen {date}; record file last modified {written}",
        "machine_value": "{device}, {cpu} ({path} code path), torch {torch}, Python {python}; "
                         "{threads} thread(s) × {workers} worker(s); {wall:.1f} s training "
                         "wall time",
        "verified": "VERIFIED: no check failed ({passed} passed, {warned} warnings, "
                    "{skipped} skipped): hashes, checkpoint re-evaluation, summary, counts, "
                    "provenance",
        "not_verified": "NOT VERIFIED: {failed} of {total} checks failed ({names})",
        "reused": " — checks of {when}, reused: the run's files, postlab's source and the "
                  "numeric environment are unchanged since ('postlab verify RUN' checks "
                  "afresh)",
        "not_checked": "not checked: a record without its run folder (plan.json and "
                       "checkpoints beside it) cannot be verified; 'postlab verify RUN' checks "
                       "a run folder",
        "dynamic_sampling": "dynamic sampling (at most {extra} extra groups)",
    },
    "zh": {
        "heading": "训练了什么", "verification": "核验", "findings": "结论",
        "task": "任务", "policy": "策略模型", "sft": "SFT", "rl": "RL", "arms": "实验组",
        "options": "算法", "evaluation": "评估", "seeds": "种子", "plan": "计划",
        "when": "时间", "machine": "机器",
        "pairs": "{split} {n} 对", "operands": "操作数 0–{top}",
        "parameters": "{n:,} 个参数",
        "sft_value": "{steps} 步 × 每步 {batch} 对，学习率 {lr:g}",
        "rl_value": "{steps} 步 × {prompts} 个问题 × {group} 个采样，每次采样更新 {updates} "
                    "次，学习率 {lr:g}，裁剪 {clip}，KL 权重 {beta:g}，梯度裁剪 {grad:g}，"
                    "温度 {temperature:g}，最多 {tokens} 个新词元",
        "arm_value": "{name}：{pipeline}",
        "pipeline_sft-then-rl": "先 SFT，再按{contract}契约做 RL",
        "pipeline_rl-only": "只做 RL（从未训练的模型开始），按{contract}契约",
        "pipeline_sft-only": "只做 SFT（再训练 {steps} 步）",
        "evaluation_value": "每个问题贪心一次、采样 {samples} 次；按 {contracts} 判定",
        "plan_value": "第 {version} 版，{date} 冻结，sha256 {sha}",
        "when_value": "计划 {date} 冻结；记录文件最后修改于 {written}",
        "machine_value": "{device}，{cpu}（{path} 代码路径），torch {torch}，Python "
                         "{python}；{threads} 线程 × {workers} 进程；训练用时 {wall:.1f} 秒",
        "verified": "已核验：没有检查失败（通过 {passed}，警告 {warned}，跳过 {skipped}）："
                    "哈希、检查点重评估、摘要、计数、来源",
        "not_verified": "未通过核验：{total} 项检查中 {failed} 项失败（{names}）",
        "reused": "——沿用 {when} 的检查结果：此后运行的文件、postlab 源码和数值环境均未改变"
                  "（“postlab verify RUN” 会重新核验）",
        "not_checked": "未核验：没有运行文件夹（旁边没有 plan.json 和检查点）的记录无法核验；"
                       "“postlab verify RUN” 核验运行文件夹",
        "dynamic_sampling": "动态采样（最多额外 {extra} 组）",
    },
}


def _policy(plan: dict[str, Any], record: dict[str, Any], words: dict[str, str]) -> str:
    section = plan.get("policy")
    if section is None or section.get("kind") == "gru":
        shape = f"GRU, embedding {plan['embedding']}, hidden {plan['hidden']}"
    else:
        details = ", ".join(f"{key} {value}" for key, value in section.items() if key != "kind")
        shape = f"{section['kind']}: {details}"
    if "parameters" in record:
        shape += "; " + words["parameters"].format(n=record["parameters"])
    if plan.get("precision"):
        shape += f"; {plan['precision']}"
    return shape


def overview_rows(plan: dict[str, Any], record: dict[str, Any], written: str | None,
                  lang: str) -> list[tuple[str, str]]:
    """(label, value) rows of what was trained, for the report's first screen."""
    words = OVERVIEW_WORDS[lang]
    task = task_for(plan)
    splits = ", ".join(words["pairs"].format(split=name, n=len(pairs))
                       for name, pairs in plan["split"].items())
    arms = []
    for arm in arm_specs(plan):
        pipeline = words[f"pipeline_{arm.pipeline}"].format(contract=arm.contract,
                                                            steps=arm.sft_steps)
        arms.append(words["arm_value"].format(name=arm.name, pipeline=pipeline))
    clip = f"{plan['clip']:g}" + (f"/{plan['clip_high']:g}" if plan.get("clip_high") else "")
    options = [plan["advantage"], plan["loss_reduction"], plan["kl"]]
    if plan.get("dynamic_sampling"):
        options.append(words["dynamic_sampling"].format(
            extra=plan["dynamic_sampling"]["max_extra_groups"]))
    options.append(plan["selection"])
    numerics = record.get("numerics", {})
    rows = [
        (words["task"], f"{task.name} ({words['operands'].format(top=task.operand_limit - 1)}"
                        f"); {splits}"),
        (words["policy"], _policy(plan, record, words)),
        (words["sft"], words["sft_value"].format(steps=plan["sft_steps"],
                                                 batch=plan["sft_batch"], lr=plan["sft_lr"])),
        (words["rl"], words["rl_value"].format(
            steps=plan["rl_steps"], prompts=plan["prompts_per_step"], group=plan["group_size"],
            updates=plan["updates_per_rollout"], lr=plan["rl_lr"], clip=clip,
            beta=plan["kl_beta"], grad=plan["gradient_clip"], temperature=plan["temperature"],
            tokens=plan["max_new_tokens"])),
        (words["arms"], "; ".join(arms)),
        (words["options"], "; ".join(options)),
        (words["evaluation"], words["evaluation_value"].format(
            samples=plan["eval_samples"], contracts=", ".join(plan_contracts(plan)))),
        (words["seeds"], ", ".join(str(run["seed"]) for run in record["runs"])),
        (words["plan"], words["plan_value"].format(version=plan["version"], date=plan["date"],
                                                   sha=record["plan_sha256"][:16] + "…")),
        (words["when"], words["when_value"].format(date=plan["date"],
                                                   written=written or "—")),
        (words["machine"], words["machine_value"].format(
            device=record.get("device", "cpu"), cpu=numerics.get("cpu_model", "?"),
            path=numerics.get("code_path", "?"), torch=record.get("torch", "?"),
            python=record.get("python", "?"), threads=record.get("threads", 1),
            workers=record.get("workers", 1), wall=record.get("wall_seconds", 0.0))),
    ]
    return rows


def verification_line(checks: list[Any] | None, lang: str, *,
                      reused_from: str | None = None) -> tuple[str, bool | None]:
    """One line on the run's verification and whether it passed (None: not checked);
    ``reused_from`` is when the checks ran, if they were reused rather than run now."""
    words = OVERVIEW_WORDS[lang]
    if checks is None:
        return words["not_checked"], None
    when = "" if reused_from is None else words["reused"].format(when=reused_from)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        return words["not_verified"].format(failed=len(failed), total=len(checks),
                                            names=", ".join(c.name for c in failed)) + when, False
    count = {status: sum(c.status == status for c in checks)
             for status in ("pass", "warn", "skip")}
    return words["verified"].format(passed=count["pass"], warned=count["warn"],
                                    skipped=count["skip"]) + when, True
