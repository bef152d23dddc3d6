# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 给一个小加法器做后训练：十道练习，逐题算出来
#
# 一个字符级 GRU 先用监督微调（SFT）学会一位数加法，再在两种奖励契约下做
# GRPO 式强化学习（RL）：`strict` 要求输出以结束符收尾、全是数字且数值等于
# a+b；`substring` 只要输出里某处出现 a+b 的十进制写法就给分，策略可以钻它的空子。
# 这个实验所在的章节最后留了十道练习，本课用 postlab 逐题作答。
#
# 下面的每个数都在本笔记本里现算：要么调用 postlab 的库函数，要么读取随包附带的
# 教学计划训练结果，要么当场用几秒钟训练一个小计划。正文从不写死算出来的数：
# 它只说该看什么，数字由代码打印，再由 `assert` 检验正文的说法；说法一旦不对，
# 笔记本就会在那一格停下。
#
# 可以转成笔记本打开（`jupytext --to notebook lessons/zh/lesson.py`），也可以直接
# 当脚本运行（`python lessons/zh/lesson.py`）。两核机器上一分半钟以内跑完。

# %% [markdown]
# ## 准备
#
# 本课用到的一切都来自 postlab。随包附带的训练结果里有教学计划的记录（若干种子；
# 每个种子先 SFT，再按每种契约各训练一个 RL 分支）、计划文件和全部检查点。
# 记录按严格格式读取，并核对它所声明的计划；读出的是有类型的值：
# `record.runs[0].arms["strict"][0].rows` 是第一步 RL 的回答，每个都是
# `Row(a, b, text, terminated)`。

# %%
import json
import random
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

from postlab.analysis.exercises import EXERCISES, RUN_EXERCISES, exercise_8
from postlab.errors import UserError
from postlab.plan.arms import rl_contracts
from postlab.plan.frozen import (
    derive_plan,
    freeze,
    load_plan,
    parse_plan,
    plan_bytes,
    split_by_unordered_pair,
    teaching_plan_loaded,
)
from postlab.records.blocks import iter_rows
from postlab.records.metrics import summary_for
from postlab.records.record import (
    bundled_run_dir,
    check_plan_link,
    load_record,
    one_document,
    record_in,
)
from postlab.records.rescore import rescore
from postlab.rl.algorithms import resolve
from postlab.rl.groups import contrast_probability, group_advantages
from postlab.rl.losses import token_coefficients
from postlab.rl.objective import clipped_gain, outside_clip
from postlab.tasks.arithmetic import DIGITS
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row


def show(exercise):
    """库对某道题给出的原始输出（英文）。"""
    print(f"第 {exercise.number} 题（库的输出）：{exercise.title}")
    for line in exercise.lines:
        print(f"  {line}")


def rollout_rewards(step, contract):
    """记录中某一步 RL 采样在给定契约下的奖励，每组回答一个列表。"""
    rewards = [score(row, contract) for row in step.rows]
    size = plan.group_size
    return [rewards[i:i + size] for i in range(0, len(rewards), size)]


RUN = bundled_run_dir()
assert RUN is not None, "这个 postlab 构建没有附带训练结果"
record = load_record(record_in(RUN))
plan_file = load_plan(RUN / "plan.json")
check_plan_link(record, plan_file, str(RUN))  # 记录若出自别的计划，这里会拒绝
plan = plan_file.model
# 按计划的线程数（一个 torch 线程）计算：在核数少、有人共用的机器上最快
torch.set_num_threads(plan.threads)
CONTRACT_OF = rl_contracts(plan)  # RL 分支 -> 它训练时用的契约
print("种子：", plan.seeds, "| RL 分支及其契约：", CONTRACT_OF)
print("每个分支的 RL 步数：", plan.rl_steps, "| 每组回答数：", plan.group_size)

# %% [markdown]
# ## 第 1 题：严格契约与子串契约
#
# *题目：对 5+5，两种契约分别给输出 `1010` 多少奖励？对 0+1，模型输出 `1`
# 却没有发出结束符时，又分别给多少？*
#
# `strict` 只奖励以结束符收尾、由数字组成、数值等于和的输出；`substring`
# 只看输出里有没有和的数字串。所以 `1010` 拿得到子串奖励、拿不到严格奖励；
# 没收尾的 `1` 也一样。在 `strict` 看来，没有写完的回答根本不算回答。

# %%
answer_1 = EXERCISES[1]()
show(answer_1)
assert answer_1.values["1010"] == {"strict": 0, "substring": 1}
assert answer_1.values["1"] == {"strict": 0, "substring": 1}

print("5+5 时策略可能给出的输出（文本，是否收尾）：")
candidates = [("10", True), ("010", True), ("10", False), ("1010", True), ("910", True)]
paid_only_by_substring = []
for text, terminated in candidates:
    row = Row(5, 5, text, terminated)
    strict, substring = score(row, "strict"), score(row, "substring")
    print(f"  {text!r:8} 收尾={terminated!s:5}  strict={strict}  substring={substring}")
    if substring and not strict:
        paid_only_by_substring.append((text, terminated))
# 所有“两头下注”的输出和没写完的输出，都只有子串契约肯付钱
assert paid_only_by_substring == [("10", False), ("1010", True), ("910", True)]

# %% [markdown]
# 策略真的会找到这些空子吗？在附带的训练结果里数一数 `substring` 接受而
# `strict` 拒绝的输出（下称“投机”输出）：一处是各分支训练时的 RL 采样，
# 一处是训练后对留出测试题的采样回答。按 `substring` 训练的分支投机的比例
# 是按 `strict` 训练的分支的好几倍，也是它出发时的 SFT 模型的好几倍。

# %%
gamed, seen, examples = Counter(), Counter(), Counter()
for place, row in iter_rows(record):
    if place.decoding == "rollout":
        where = "rollout"
    elif place.split == "test" and place.decoding == "sampled":
        where = "test"
    else:
        continue
    seen[place.stage, where] += 1
    if score(row, "substring") and not score(row, "strict"):
        gamed[place.stage, where] += 1
        if place.stage == "substring" and where == "test":
            examples[f"{row.a}+{row.b} -> {row.text!r}"] += 1

labels = {"rollout": "RL 采样", "test": "测试题采样"}
share = {}
for stage, where in seen:
    share[stage, where] = gamed[stage, where] / seen[stage, where]
    print(f"{stage:9} {labels[where]}：投机 {gamed[stage, where]} / "
          f"{seen[stage, where]}（比例 {share[stage, where]:.3f}）")
print("子串分支在测试题上最常见的投机输出：", examples.most_common(3))
assert share["substring", "rollout"] > 3 * share["strict", "rollout"]
assert share["substring", "test"] > 3 * max(share["strict", "test"], share["initial", "test"])

# %% [markdown]
# ## 第 2 题：组内归一化优势
#
# *题目：一组八个回答的奖励是 1,1,1,1,0,0,0,0，均值、标准差和各回答的优势是多少？
# 八个全错时呢？*
#
# 优势等于奖励减去组内均值，再除以组内总体标准差（另加一个极小常数，免得除以零）。
# 对错各半的组里，答对与答错的优势大小相同、符号相反，各偏离一个标准差；
# 奖励全同的组里所有优势都消失，这一组什么也教不了。

# %%
answer_2 = EXERCISES[2]()
show(answer_2)
mixed = [1, 1, 1, 1, 0, 0, 0, 0]
print("均值", statistics.fmean(mixed), "总体标准差", statistics.pstdev(mixed))
assert all(abs(a - (1 if r else -1)) < 1e-6
           for a, r in zip(answer_2.values["mixed"], mixed, strict=True))
assert answer_2.values["constant"] == [0.0] * 8

# %% [markdown]
# 同一个函数用在真实的组上：第一个种子 `strict` 分支第一步 RL 里第一个对错混合的组。
# 训练时每一步都记下了奖励毫无差别的组数；从存下来的回答重新数一遍，
# 必须和记录一致。

# %%
first_run = record.runs[0]
history = first_run.arms["strict"]
group = next(g for g in rollout_rewards(history[0], "strict") if len(set(g)) > 1)
advantages = group_advantages(group)
print("奖励", group)
print("优势", [round(a, 4) for a in advantages])
assert abs(sum(advantages)) < 1e-6
assert all((a > 0) == bool(r) for a, r in zip(advantages, group, strict=True))

for run in record.runs:
    for arm, steps in run.arms.items():
        constant = sum(len(set(g)) == 1 for step in steps
                       for g in rollout_rewards(step, CONTRACT_OF[arm]))
        recorded = sum(step.zero_variance_groups for step in steps)
        total = len(steps) * plan.prompts_per_step
        print(f"种子 {run.seed} {arm:9} 没有信号的组：{constant} / {total}"
              f"（比例 {constant / total:.3f}）")
        assert constant == recorded

# %% [markdown]
# ## 第 3 题：等多久才出现有信号的组
#
# *题目：某道题答对的概率是 0.01。平均要抽多少组（每组八个回答）才第一次出现
# 有对有错的组？这个估计依赖哪些假设？*
#
# 除非八个全对或全错，一组就是混合的；等到第一个混合组的组数服从几何分布，
# 均值是混合概率的倒数。

# %%
answer_3 = EXERCISES[3]()
show(answer_3)
p, size = 0.01, 8
assert abs(answer_3.values["contrast"] - (1 - p**size - (1 - p) ** size)) < 1e-15
assert abs(answer_3.values["groups"] * answer_3.values["contrast"] - 1) < 1e-12

# 直接模拟等待时间，结果在标准误之内与公式一致
rng = random.Random(3)
waits = []
for _ in range(4000):
    drawn = 0
    while True:
        drawn += 1
        rights = sum(rng.random() < p for _ in range(size))
        if 0 < rights < size:
            break
    waits.append(drawn)
mean_wait = statistics.fmean(waits)
error = statistics.stdev(waits) / len(waits) ** 0.5
print(f"模拟的平均等待 {mean_wait:.2f} ± {error:.2f} 组")
assert abs(mean_wait - answer_3.values["groups"]) < 4 * error

# %% [markdown]
# 这个估计假定只有一道题、成功率固定、各组相互独立。真实训练三条都不满足：
# 每一步抽到的题不同、难度不同，策略也在边学边变。用附带的训练结果验证两点。
# 如果一步里每道题的成功率都等于这一步的总体成功率，公式预测的无信号组会很少；
# 实际观察到的是预测的两倍以上，因为容易的题总是全对，难的题总是全错。
# 另外，成功率本身从最初几步到最后几步一路上升。

# %%
for run in record.runs:
    for arm, steps in run.arms.items():
        contract = CONTRACT_OF[arm]
        observed = predicted = 0.0
        for step in steps:
            groups = rollout_rewards(step, contract)
            rate = statistics.fmean(r for g in groups for r in g)
            predicted += len(groups) * (1 - contrast_probability(rate, plan.group_size))
            observed += sum(len(set(g)) == 1 for g in groups)

        def success(window, contract=contract):
            return statistics.fmean(r for step in window
                                    for g in rollout_rewards(step, contract) for r in g)

        early, late = success(steps[:20]), success(steps[-20:])
        print(f"种子 {run.seed} {arm:9} 没有信号的组：实际 {observed:.0f}，"
              f"按该步总体成功率预测 {predicted:.1f}；前 20 步成功率 {early:.3f}，"
              f"后 20 步 {late:.3f}")
        assert observed > 2 * predicted
        assert late > early

# %% [markdown]
# ## 第 4 题：损失的归约方式怎样给每个词元加权
#
# *题目：两个回答分别有 4 个和 16 个词元。先在每个回答内平均、再对回答平均时，
# 每个词元的系数是多少？对整批所有词元直接平均时又是多少？*
#
# 下面的系数就是训练所用归约函数的梯度，以“对回答取平均”为单位表示。
# 先在回答内平均，每个回答的总权重相同，于是短回答的词元比长回答的词元更重；
# 对所有词元平均，则每个词元一样重。换一种归约，梯度由哪些词元主导就跟着变，
# 并不只是把整个损失放大或缩小。

# %%
answer_4 = EXERCISES[4]()
show(answer_4)
lengths = [4, 16]
per_answer = answer_4.values["seq-mean-token-mean"]
per_token = answer_4.values["token-mean"]
assert all(abs(w - 1 / n) < 1e-12 for w, n in zip(per_answer, lengths, strict=True))
assert all(abs(w - len(lengths) / sum(lengths)) < 1e-12 for w in per_token)
for reduction in ("seq-mean-token-mean", "token-mean", "constant-normaliser"):
    weights = token_coefficients(lengths, reduction, per_sequence_units=True)
    totals = [sum(row) for row in weights]
    print(f"{reduction:20} 短/长词元权重之比 {weights[0][0] / weights[1][0]:.2f}，"
          f"每个回答的总权重 {[round(t, 3) for t in totals]}")
    if reduction == "seq-mean-token-mean":
        assert weights[0][0] > weights[1][0] and abs(totals[0] - totals[1]) < 1e-12
    if reduction == "token-mean":
        assert weights[0][0] == weights[1][0] and totals[1] > totals[0]

# %% [markdown]
# 这在本实验里为什么要紧：教学计划对所有词元平均（见下面打印的
# `loss_reduction`），而附带结果里 `substring` 分支的投机回答比它答对的回答长。
# 在这种归约下，每个投机回答占的词元更多，在损失里的分量也就比一个正确回答大。

# %%
print("教学计划的归约方式：", plan.loss_reduction)
assert resolve("loss_reduction", plan.loss_reduction) == "token-mean"
for run in record.runs:
    tokens = {"gamed": [], "right": []}
    for step in run.arms["substring"]:
        for row in step.rows:
            if score(row, "strict"):
                tokens["right"].append(row.tokens)
            elif score(row, "substring"):
                tokens["gamed"].append(row.tokens)
    gamed_mean, right_mean = (statistics.fmean(tokens[k]) for k in ("gamed", "right"))
    print(f"种子 {run.seed} 子串分支：投机回答平均 {gamed_mean:.2f} 个词元，"
          f"正确回答平均 {right_mean:.2f} 个")
    assert gamed_mean > right_mean

# %% [markdown]
# ## 第 5 题：PPO 的裁剪项
#
# *题目：概率比为 1.3、裁剪范围为 0.2 时，优势为 +1 和 −1 的
# min(r·A, clip(r)·A) 各是多少？*
#
# 优势为正时，裁剪后的值更小；优势为负时，未裁剪的乘积更小，取最小值就把它留下了。
# “被标记为超出裁剪范围”和“没有梯度”是两回事：对训练所用的同一个函数求导，
# +1 时梯度为零，−1 时梯度不为零。

# %%
answer_5 = EXERCISES[5]()
show(answer_5)
ratio_value, clip = 1.3, 0.2
assert abs(answer_5.values[1.0] - (1 + clip)) < 1e-12
assert abs(answer_5.values[-1.0] - (-ratio_value)) < 1e-12

for advantage in (1.0, -1.0):
    ratio = torch.tensor([[ratio_value]], requires_grad=True)
    gain = clipped_gain(ratio, torch.tensor([advantage]), clip, clip)
    gain.sum().backward()
    flagged = bool(outside_clip(ratio.detach(), clip, clip).item())
    print(f"优势 {advantage:+.0f}：该项 {gain.item():+.2f}，对比值的导数 "
          f"{ratio.grad.item():+.2f}，计为超出裁剪范围：{flagged}")
    assert flagged
    assert (ratio.grad.item() == 0) == (advantage > 0)

# %% [markdown]
# ## 第 6 题：按无序数对划分数据
#
# *题目：为什么要把 3+4 和 4+3 放进同一个划分？留出测试与训练之间还共享什么？*
#
# 如果一对数的两种顺序可以分到两边，测试题就可能靠回忆训练里交换了顺序的那道题
# 答出来。按无序数对划分，每对数只落在一边。仍然共享的是任务本身和它用到的符号：
# 测试题里的每个数字在训练中都出现过。测试考的是熟悉的数字、熟悉的规则之下的
# 新组合。

# %%
answer_6 = EXERCISES[6]()
show(answer_6)
split = split_by_unordered_pair()
assert set(answer_6.values["overlaps"].values()) == {0}
assert sum(answer_6.values["sizes"].values()) == len(DIGITS) ** 2

# 对照做法：把有序数对打乱，按同样的大小切分
ordered = [(a, b) for a in range(len(DIGITS)) for b in range(len(DIGITS))]
random.Random(6).shuffle(ordered)
n_train = len(split["train"])
naive_train = set(ordered[:n_train])
naive_test = ordered[len(ordered) - len(split["test"]):]
twins = sum((b, a) in naive_train for a, b in naive_test if a != b)
print(f"按有序数对打乱时，有 {twins} 道测试题（共 {len(naive_test)} 道）的"
      f"交换版本落在训练集")
assert twins > 0

train_digits = {d for pair in split["train"] for d in pair}
test_digits = {d for pair in split["test"] for d in pair}
new_answers = sorted({sum(p) for p in split["test"]} - {sum(p) for p in split["train"]})
print("测试题中在训练里见过的数字：", sorted(test_digits & train_digits),
      "| 从未作为训练答案出现的测试答案：", new_answers)
assert test_digits <= train_digits
assert new_answers  # 有些和必须靠组合得出，训练时从未作为目标出现

# %% [markdown]
# ## 第 7 题：正确率与覆盖率
#
# *题目：两道题，各采样四次。训练前每道题各有一次答对；训练后第一题四次全对，
# 第二题一次也没对。答对的次数和被覆盖的题数各怎样变化？*
#
# 答对次数翻倍，覆盖（至少答对一次的题数）却减半：策略可以在已经会的题上
# 越来越准，同时丢掉原来偶尔能做对的题。

# %%
answer_7 = EXERCISES[7]()
show(answer_7)
before, after = answer_7.values["before"], answer_7.values["after"]
assert after["correct"] == 2 * before["correct"]
assert 2 * after["covered"] == before["covered"]

# %% [markdown]
# 附带的训练结果里也有同样的现象：按种子列出 SFT 之后和每个 RL 分支之后，
# 对留出测试题的采样回答（每题采样次数为计划里的 `eval_samples`）中答对的次数
# 和覆盖的题数。至少有一个种子，RL 让答对次数增加，覆盖的题却变少了。

# %%
sampled = {(e["seed"], e["stage"]): e["test"]["sampled"] for e in summary_for(record, plan)}
print("每道测试题的采样次数：", plan.eval_samples)
narrowed = []
for seed in plan.seeds:
    base = sampled[seed, "initial"]
    print(f"种子 {seed} SFT 之后：答对 {base['strict']} / {base['n']}，"
          f"覆盖 {base['covered']} / {base['questions']}")
    for arm in CONTRACT_OF:
        got = sampled[seed, arm]
        print(f"种子 {seed} {arm:9} 之后：答对 {got['strict']} / {got['n']}，"
              f"覆盖 {got['covered']} / {got['questions']}")
        if got["strict"] > base["strict"] and got["covered"] < base["covered"]:
            narrowed.append((seed, arm))
print("答对更多、覆盖更少的（种子，分支）：", narrowed)
assert narrowed

# %% [markdown]
# ## 第 8 题：只在到过的前缀上精确的 KL
#
# *题目：训练用的是到 SFT 模型的精确 KL，在每个位置对整个词表求和。
# 为什么这仍然不是两个模型在完整回答上的精确 KL？*
#
# 训练确实对词表精确求和，但只在旧策略采样出的回答所经过的位置上求；
# 会经过哪些位置，本身就是随机的。沿一条采样回答累加，结果的平均等于完整回答
# 上的 KL，可每条回答算出来都不一样。库函数枚举词元预算之内的每一个前缀，
# 算出真正的序列 KL，再与沿采样回答逐前缀累加的值（以及累加的对数比 k1）比较；
# 对象是第一个种子的每个 RL 分支。

# %%
answer_8 = exercise_8(record, plan, RUN, prompts=2, samples=2000)
show(answer_8)
for values in answer_8.values.values():
    assert abs(values["prefix_mean"] - values["exact"]) < 5 * values["prefix_se"]
    assert values["prefix_min"] < values["exact"] < values["prefix_max"]
    assert values["k1_se"] > values["prefix_se"]

# %% [markdown]
# 训练到过的前缀有多少：对第一个种子 `strict` 分支的每道题，数一数它的 RL 采样
# 经过的不同前缀，与预算内一个回答可能经过的全部前缀相比。

# %%
budget = plan.max_new_tokens
per_question = sum(len(DIGITS) ** k for k in range(budget))  # 结束符之前的前缀
visited = set()
for step in first_run.arms["strict"]:
    for row in step.rows:
        for end in range(min(len(row.text), budget - 1) + 1):
            visited.add((row.pair, row.text[:end]))
questions = len({pair for pair, _ in visited})
fraction = len(visited) / (questions * per_question)
print(f"{questions} 道题，每题可能的前缀 {per_question} 个；实际经过 {len(visited)} 个"
      f"（占可能总数的 {fraction:.5f}）")
assert fraction < 0.01

# %% [markdown]
# ## 第 9 题：匹配计算量的消融实验
#
# *题目：怎样说明 RL 带来的东西，是多做 SFT 得不到的？*
#
# 在相同预算下比较只差一处的流程：先 SFT 再 RL；从未训练的权重直接做 RL；
# 只做 SFT，但多做与 RL 同样多的梯度步。多个种子，同一套留出评估。
# 下面把这样一个计划（教学计划的新版本，RL 步数更少、两个种子）用
# `python -m postlab run` 训练到临时目录，再打印库生成的消融表。表里列出每个阶段的
# 计算量，“匹配”是核对出来的，而不是假定的；每个结果也带着跨种子的区间。
# 两个种子能说明的东西很有限：区间要么很宽，要么在两个种子恰好变化相同时宽度为零——
# 这并不代表确定。真正的比较要训练更多种子。

# %%
rl_steps = 40
extra_sft = rl_steps * plan.updates_per_rollout  # 与 RL 的更新次数相同的梯度步
arms = [{"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
        {"name": "rl-only", "pipeline": "rl-only", "contract": "strict"},
        {"name": "sft-more", "pipeline": "sft-only", "sft_steps": extra_sft}]
ablation = derive_plan(teaching_plan_loaded(),
                       ["seeds=[11, 22]", f"rl_steps={rl_steps}", f"arms={json.dumps(arms)}"],
                       today="2026-12-01")
with tempfile.TemporaryDirectory() as folder:
    plan_path, out = Path(folder) / "plan.json", Path(folder) / "run"
    freeze(plan_path, ablation)
    trained = subprocess.run([sys.executable, "-m", "postlab", "run", "--plan", str(plan_path),
                              "--out-dir", str(out), "--workers", "1", "--quiet"],
                             capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr
    answer_9 = RUN_EXERCISES[9](load_record(record_in(out)), load_plan(plan_path).model, out)
show(answer_9)
table = answer_9.values
sft = ablation["sft_steps"]
assert table["sft-more"]["gradient_steps"] == table["sft-then-rl"]["gradient_steps"]
assert table["sft-then-rl"]["gradient_steps"] == sft + extra_sft
assert table["rl-only"]["gradient_steps"] == extra_sft
assert table["sft-more"]["completions"] == 0 < table["rl-only"]["completions"]

# %% [markdown]
# ## 第 10 题：更严格的契约，以及改规则意味着什么
#
# *题目：对 3+4，`strict` 接受 `007`。怎样让规则更严？已经按旧规则报告的结果
# 该怎么处理？*
#
# `exact` 契约还要求输出恰好是和的十进制写法，不能有前导零。训练之后才改的规则
# 是一种新的度量，而不是对旧度量的修补：存下的输出原样保留，两种规则都给它们
# 打分，每个图表都注明自己用的是哪条规则。

# %%
answer_10 = EXERCISES[10]()
show(answer_10)
assert answer_10.values["007"] == {"strict": 1, "exact": 0}
assert answer_10.values["010"] == {"strict": 1, "exact": 0}
assert answer_10.values["7"] == {"strict": 1, "exact": 1}

before = json.dumps(one_document(record), sort_keys=True)
rescored = rescore(record, CONTRACT_OF, ["strict", "exact"])
assert json.dumps(one_document(record), sort_keys=True) == before  # 记录只读不改
for gap in rescored.gaps:
    print(f"附带结果的全部评估回答：{gap.looser} 接受而 {gap.stricter} 拒绝的 "
          f"{gap.accepted_only_by_looser} 个，其中带前导零的 {gap.with_leading_zeros} 个")
gap = {(g.looser, g.stricter): g for g in rescored.gaps}
assert gap["exact", "strict"].accepted_only_by_looser == 0  # exact 从不比 strict 宽
loose = gap["strict", "exact"]
assert loose.accepted_only_by_looser == loose.with_leading_zeros  # 差别全在写法上

# %% [markdown]
# 用新规则训练则是另一个实验：一个以教学计划为父版本的新计划。它的哈希不同，
# postlab 也拒绝把附带的记录当成在新计划下训练出来的来读。

# %%
new_plan = derive_plan(teaching_plan_loaded(), ['arms=["strict", "exact"]'],
                       today="2026-12-01")
new_loaded = parse_plan(plan_bytes(new_plan), "new plan")
print("新版本", new_plan["version"], "改动", new_plan["parent"]["changes"],
      "| 父版本就是附带结果的计划：", new_plan["parent"]["sha256"] == plan_file.sha256)
assert new_plan["parent"]["sha256"] == record.plan_sha256 != new_loaded.sha256
try:
    check_plan_link(record, new_loaded, "bundled record")
except UserError as refusal:
    print("被拒绝：", str(refusal)[:60], "...")
else:
    raise AssertionError("记录不能按它没有用过的计划来读")
