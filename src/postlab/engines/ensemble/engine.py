"""SFT, RL and evaluation of many members at once: the ensemble engine's loops.

A member is one (seed, stage) model with its own plan settings; all members of a call share
the plan's shapes (vocabulary, sizes, batch sizes, steps) and learning rates, and may differ in
the other numeric settings (kl_beta, clip, temperature, gradient clip). Every reduction the
exact engine takes over a batch is taken here per member (the shared RL core,
:mod:`postlab.rl.objective`, takes a leading member dimension), the optimizer is Adam
(:func:`postlab.engines.optim.adam_for`) over the stacked tensors, and every random number
comes from the counter-based generator keyed by the member's seed (:mod:`postlab.counter`),
so a member's result does not depend on which or how many other members it trains with.

The results are the exact engine's in distribution, not in bits: the exact engine draws from
torch's generators in a fixed order, this one from counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from postlab import counter
from postlab.engines.ensemble.nets import Net
from postlab.engines.ensemble.optim import clip_per_member
from postlab.engines.ensemble.scoring import TENSOR_CONTRACTS, Answers
from postlab.engines.optim import Optimizer, adam_for
from postlab.engines.options import algorithm_of, clip_range, gate_temperatures
from postlab.engines.steps import Check, UpdateRule, advantages, gradient_step, policy_updates
from postlab.errors import NonFiniteError
from postlab.policies.base import CharTokenizer, Tokenizer
from postlab.policies.decoding import decode_loop
from postlab.rl import objective
from postlab.rl.objective import PolicySettings
from postlab.tasks.contracts import CONTRACTS, DRAWN, random_rewards, score
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def per_member(plans: Sequence[Plan], key: str,
               device: torch.device) -> torch.Tensor:
    """One plan setting per member, as a float32 tensor [members]."""
    return torch.tensor([float(getattr(p, key)) for p in plans], dtype=torch.float32,
                        device=device)


class Tables:
    """The task's questions as token tables, built once: prompts, SFT targets, expected digits
    and the digit value of every token, in the ids of the policy's ``tokenizer`` (default:
    one token per character of the plan's vocab)."""

    def __init__(self, plan: Plan, device: torch.device,
                 tokenizer: Tokenizer | None = None) -> None:
        task = task_for(plan)
        self.tokenizer = tokenizer or CharTokenizer(plan.vocab, plan.eos, plan.pad)
        tok = self.tokenizer
        self.splits = {name: [tuple(p) for p in pairs] for name, pairs in plan.split.items()}
        self.train = self.splits["train"]
        self.device = device

        def table(rows: list[list[int]]) -> torch.Tensor:
            width = max(map(len, rows))
            return torch.tensor([r + [tok.pad_id] * (width - len(r)) for r in rows],
                                device=device)

        self.prompts = {name: table([tok.encode(task.prompt(p)) for p in pairs])
                        for name, pairs in self.splits.items()}
        self.targets = table([tok.encode(f"{task.answer(p)}{plan.eos}") for p in self.train])
        width = task.longest_answer
        self.expected = {name: self._digits([task.answer(p) for p in pairs], width)
                         for name, pairs in self.splits.items()}
        self.expected_length = {name: torch.tensor([len(str(task.answer(p))) for p in pairs],
                                                   device=device)
                                for name, pairs in self.splits.items()}
        self.answers = {name: [task.answer(p) for p in pairs]
                        for name, pairs in self.splits.items()}
        digit = [-1] * tok.vocab_size
        for character in plan.vocab:
            if character.isdigit():
                digit[tok.encode(character)[0]] = int(character)
        self.digit_of = torch.tensor(digit, device=device)

    def _digits(self, values: list[int], width: int) -> torch.Tensor:
        rows = [[-1] * (width - len(str(v))) + [int(c) for c in str(v)] for v in values]
        return torch.tensor(rows, device=self.device)


def _checker(seeds: torch.Tensor, where: str) -> Check:
    """A member whose loss or gradient norm is NaN or infinite stops the batch before any
    weight moves or is saved, naming the seed: as the exact engine stops that seed."""
    def check(loss: torch.Tensor, norms: torch.Tensor) -> None:
        bad = ~(torch.isfinite(loss) & torch.isfinite(norms))
        if bool(bad.any()):
            seed = int(seeds[bad.nonzero()[0, 0]])
            raise NonFiniteError(f"non-finite loss or gradient norm at seed {seed}, {where} "
                                 f"({int(bad.sum())} of {len(seeds)} members)")
    return check


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, pad: int) -> torch.Tensor:
    """Mean cross-entropy over a member's non-pad target tokens: [members]."""
    log_p = logits.log_softmax(-1).gather(-1, target[..., None]).squeeze(-1)
    valid = (target != pad).to(log_p.dtype)
    return -(log_p * valid).sum((1, 2)) / valid.sum((1, 2))


def shared(plans: Sequence[Plan], key: str) -> float:
    """A setting every member of the batch shares (a learning rate: Adam takes one per
    optimizer, and its tensors are stacked over all members)."""
    values = {float(getattr(p, key)) for p in plans}
    if len(values) != 1:
        raise ValueError(f"members of one ensemble batch must share {key}; got {sorted(values)}")
    return values.pop()


def optimizer_for(params: Mapping[str, torch.Tensor], lr: float) -> Optimizer:
    """Adam over the stacked tensors. Its update is elementwise, so each member's slices
    step exactly as a lone model's parameters would under the same gradients."""
    return adam_for(params.values(), lr)


def supervised(params: dict[str, torch.Tensor], net: Net, tables: Tables,
               plan: Plan, seeds: torch.Tensor, lr: float,
               gradient_clip: torch.Tensor, steps: int, stream: int = counter.SFT_BATCH,
               stage: str = "SFT") -> list[list[float]]:
    """Teacher-forced SFT of every member on train pairs drawn by its own counter stream;
    returns each member's loss per step."""
    for tensor in params.values():
        tensor.requires_grad_(True)
    optimizer = optimizer_for(params, lr)
    batch = plan.sft_batch
    positions = torch.arange(batch, device=seeds.device)[None, :]
    prompt_length = tables.prompts["train"].shape[1]
    losses = []
    for step in range(steps):
        index = counter.integers(seeds[:, None], stream, step, positions, len(tables.train))
        prompts = tables.prompts["train"][index]  # [members, batch, P]
        target = tables.targets[index]
        tokens = torch.cat([prompts, target[..., :-1]], dim=2)
        logits = net.run(params, tokens, None)[0][:, :, prompt_length - 1:]
        loss = _cross_entropy(logits, target, tables.tokenizer.pad_id)
        gradient_step(loss, optimizer, lambda: clip_per_member(params, gradient_clip),
                      _checker(seeds, f"{stage} step {step + 1}"))
        losses.append(loss.detach())
    for tensor in params.values():
        tensor.requires_grad_(False)
    return torch.stack(losses, dim=1).tolist()


def _after_prompts(params: Mapping[str, torch.Tensor], net: Net, prompts: torch.Tensor,
                   repeat: int) -> tuple[torch.Tensor, Any]:
    """Read each distinct prompt [members, questions, P] once; the next-character logits and
    the net's cache after it, each repeated for the ``repeat`` answers that share the prompt:
    [members, questions x repeat, V] and the cache of as many sequences."""
    logits, cache = net.run(params, prompts, None)
    return logits[:, :, -1].repeat_interleave(repeat, dim=1), net.repeat(cache, repeat)


def continuation(params: Mapping[str, torch.Tensor], net: Net, prompts: torch.Tensor,
                 tokens: torch.Tensor, repeat: int) -> torch.Tensor:
    """Logits for each answer token given its prompt and the tokens before it: prompts
    [members, questions, P] read once for the ``repeat`` answers [members, questions x repeat,
    T] that follow each; returns [members, questions x repeat, T, V]."""
    first, cache = _after_prompts(params, net, prompts, repeat)
    if tokens.shape[-1] == 1:
        return first[:, :, None]
    rest, _ = net.run(params, tokens[..., :-1], cache)
    return torch.cat([first[:, :, None], rest], dim=2)


def log_dist(params: Mapping[str, torch.Tensor], net: Net, prompts: torch.Tensor,
             tokens: torch.Tensor, repeat: int) -> torch.Tensor:
    """Log-probabilities at each answer position (:func:`continuation`'s logits)."""
    return continuation(params, net, prompts, tokens, repeat).log_softmax(-1)


@torch.no_grad()
def decode(params: Mapping[str, torch.Tensor], net: Net, prompts: torch.Tensor,
           max_new_tokens: int, temperature: torch.Tensor, seeds: torch.Tensor, stream: int,
           step: int, eos: int, pad: int, greedy: bool = False, repeat: int = 1
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers to ``prompts`` [members, questions, P], ``repeat`` answers each (the prompt is
    read once for all of them): tokens and the mask of emitted positions [members,
    questions x repeat, T], as the exact engine's ``generate`` returns them.

    Sampling is by inverse CDF with the member's counter draw for (sequence, position), over
    the characters the policy may emit (``net.allowed``; the others have no mass), so its cost
    does not grow with a large tokenizer's vocabulary; a member's sequences end at EOS.
    Decoding stops once every member's sequences have ended, which changes the work but no
    member's tokens (ended sequences emit pad, unmasked); the result is always
    ``max_new_tokens`` wide.
    """
    logits, cache = _after_prompts(params, net, prompts, repeat)
    batch = prompts.shape[1] * repeat
    sequence = torch.arange(batch, device=prompts.device)[None, :]
    columns = net.allowed.nonzero().flatten()
    # column j sums 0..j
    upper = torch.ones(len(columns), len(columns), device=prompts.device).triu()
    # Every position's draw at once, [members, batch, max_new_tokens]: a draw is a pure
    # function of its key, so drawing ahead changes the work, not a bit (one hash of the
    # counter instead of one per position: the hash is some 200 small tensor operations).
    draws = None if greedy else counter.uniform(
        seeds[:, None, None], stream, step,
        sequence[..., None] * max_new_tokens + torch.arange(max_new_tokens,
                                                            device=prompts.device))

    def choose(logits: torch.Tensor, position: int) -> torch.Tensor:
        if greedy:
            return logits.argmax(-1)
        scaled = logits[..., columns] / temperature[:, None, None]
        # the CDF as a product with a triangular matrix: a deterministic kernel on every
        # device (CUDA's cumsum is not, under deterministic algorithms)
        cdf = scaled.softmax(-1) @ upper
        draw = draws[..., position]
        # the draw scaled to the total mass, so rounding in the sum never picks a
        # character without mass: the first index where the CDF reaches it has some
        return columns[(cdf < (draw * cdf[..., -1])[..., None]).sum(-1)]

    def advance(chosen: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        logits, cache = net.run(params, chosen[..., None], cache)
        return logits[:, :, -1], cache

    # Always max_new_tokens wide (pad, unmasked, after the end): the shape, and so every sum
    # over it, must not depend on when the company's last sequence ended.
    return decode_loop(logits, cache, advance, choose, max_new_tokens, eos, pad,
                       full_width=True)


def answers_of(tables: Tables, tokens: torch.Tensor, mask: torch.Tensor, split: str,
               index: torch.Tensor) -> Answers:
    """Decoded answers to the questions ``index`` [members, batch] of ``split``, as the
    tensor contracts read them."""
    eos = tables.tokenizer.eos_id
    emitted_eos = mask & (tokens == eos)
    visible = mask & ~emitted_eos
    return Answers(digits=torch.where(visible, tables.digit_of[tokens], -1), visible=visible,
                   terminated=emitted_eos.any(-1), expected=tables.expected[split][index],
                   expected_length=tables.expected_length[split][index])


def all_rows(tables: Tables, tokens: torch.Tensor, mask: torch.Tensor,
             pairs: Sequence[Sequence[Sequence[int]]]) -> list[list[list[Any]]]:
    """Every member's rows ``[a, b, text, terminated]`` (``pairs`` per member). Answers are
    few and repeat a lot, so each distinct one is turned into text once: every answer gets
    an integer key (its visible tokens in base V + 1), and only the distinct keys are
    decoded."""
    members, _, width = tokens.shape
    base = tables.tokenizer.vocab_size + 1
    if base ** width >= 2 ** 62:  # too long for one integer key: row by row
        return [rows_of(tables, tokens, mask, pairs[m], m) for m in range(members)]
    eos = tables.tokenizer.eos_id
    visible = mask & (tokens != eos)
    terminated = (mask & (tokens == eos)).any(-1)
    powers = base ** torch.arange(width, device=tokens.device)
    keys = ((tokens + 1) * visible * powers).sum(-1)
    distinct, inverse = torch.unique(keys, return_inverse=True)
    texts = []
    for key in distinct.tolist():
        chars = []
        while key:
            key, digit = divmod(key, base)
            if digit:
                chars.append(digit - 1)
        texts.append(tables.tokenizer.decode(chars))
    inverse_rows, ended = inverse.tolist(), terminated.tolist()
    return [[[pair[0], pair[1], texts[k], done]
             for pair, k, done in zip(pairs[m], inverse_rows[m], ended[m], strict=True)]
            for m in range(members)]


def rows_of(tables: Tables, tokens: torch.Tensor, mask: torch.Tensor, pairs: list,
            member: int) -> list[list[Any]]:
    """One member's rows ``[a, b, text, terminated]``, as the exact engine records them."""
    decode_text = tables.tokenizer.decode
    eos = tables.tokenizer.eos_id
    rows = []
    for pair, seq, valid in zip(pairs, tokens[member].tolist(), mask[member].tolist(),
                                strict=True):
        ids = [t for t, use in zip(seq, valid, strict=True) if use]
        terminated = bool(ids) and ids[-1] == eos
        rows.append([pair[0], pair[1], decode_text(ids[:-1] if terminated else ids),
                     terminated])
    return rows


def rewards_for(contracts: Sequence[str], answers: Answers, rows: list[list[list[Any]]],
                answer_of, seeds: torch.Tensor, step: int,
                random_rate: float | None) -> torch.Tensor:
    """Each member's reward under its own contract [members, batch] (float32); a contract
    paid at random pays from each member's seed and the step, as the exact engine's does."""
    result = torch.zeros(answers.terminated.shape, dtype=torch.float32,
                         device=answers.terminated.device)
    for name in dict.fromkeys(contracts):
        members = [m for m, c in enumerate(contracts) if c == name]
        if name in DRAWN:
            assert random_rate is not None  # the plan's validation asks for it
            result[members] = random_rewards(seeds[members], step, result.shape[1],
                                             random_rate).to(result.device)
        elif name in TENSOR_CONTRACTS:
            accepted = TENSOR_CONTRACTS[name](answers)
            result[members] = accepted[members].to(torch.float32)
        else:  # a contract without a tensor form: scored answer by answer
            for m in members:
                result[m] = torch.tensor([score(Row.of(r), name, answer_of) for r in rows[m]],
                                         dtype=torch.float32)
    return result


def reinforce(params: dict[str, torch.Tensor], reference: Mapping[str, torch.Tensor],
              net: Net, tables: Tables, plans: Sequence[Plan],
              seeds: torch.Tensor, contracts: Sequence[str], on_step=None,
              keep_rows: bool = True
              ) -> list[list[dict[str, Any]]]:
    """GRPO-style RL of every member from ``params`` under its own contract, KL-anchored to
    ``reference``; returns each member's per-step history in the exact engine's form.

    Shapes and options (group size, steps, advantage, reduction, KL estimator) are the first
    plan's and must be shared; numeric settings are each member's own.
    """
    plan = plans[0]
    device = seeds.device
    for name in contracts:
        CONTRACTS[name]  # an unknown contract fails before any training
    # double precision, as a lone model's Python floats: the core rounds the clip range once
    settings = PolicySettings(
        torch.tensor([clip_range(p)[0] for p in plans], dtype=torch.float64, device=device),
        torch.tensor([clip_range(p)[1] for p in plans], dtype=torch.float64, device=device),
        *(torch.tensor([gate_temperatures(p)[side] for p in plans], dtype=torch.float32,
                       device=device) for side in (0, 1)))
    rule = UpdateRule(algorithm_of(plan), settings, per_member(plans, "kl_beta", device),
                      plan.max_new_tokens, plan.updates_per_rollout)
    temperature = per_member(plans, "temperature", device)
    gradient_clip = per_member(plans, "gradient_clip", device)
    group, prompts_per_step = plan.group_size, plan.prompts_per_step
    max_new = plan.max_new_tokens
    eos, pad = tables.tokenizer.eos_id, tables.tokenizer.pad_id
    members = seeds.shape[0]
    task = task_for(plan)
    for tensor in params.values():
        tensor.requires_grad_(True)
    optimizer = optimizer_for(params, shared(plans, "rl_lr"))
    question = torch.arange(prompts_per_step, device=device)[None, :]
    histories: list[list[dict[str, Any]]] = [[] for _ in range(members)]
    for step in range(1, plan.rl_steps + 1):
        chosen = counter.integers(seeds[:, None], counter.RL_PROMPTS, step, question,
                                  len(tables.train))
        index = chosen.repeat_interleave(group, dim=1)  # [members, prompts x group]
        prompts = tables.prompts["train"][chosen]  # each question's prompt, read once
        tokens, mask = decode(params, net, prompts, max_new, temperature, seeds,
                              counter.ROLLOUT, step, eos, pad, repeat=group)
        answers = answers_of(tables, tokens, mask, "train", index)
        # Rows are the record's; without them (a benchmark of the computation alone) only a
        # contract without a tensor form still needs them, to be scored.
        rows: list[list[list[Any]]] = [[] for _ in range(members)]
        if keep_rows or any(c not in TENSOR_CONTRACTS and c not in DRAWN for c in contracts):
            pairs = [[tables.train[i] for i in row] for row in index.tolist()]
            rows = all_rows(tables, tokens, mask, pairs)
        rewards = rewards_for(contracts, answers, rows, task.answer, seeds, step,
                              plan.random_rate)
        advantage = advantages(rule.algorithm, rewards, group)
        std = objective.group_reward_std(rewards, group)
        with torch.no_grad():
            ref_log = log_dist(reference, net, prompts, tokens, group)
        stacked = policy_updates(
            rule, partial(log_dist, params, net, prompts, tokens, group),
            ref_log, tokens, mask, advantage, optimizer=optimizer,
            clip=lambda: clip_per_member(params, gradient_clip),
            check=_checker(seeds, f"RL step {step}"))
        listed = [{key: value.tolist() for key, value in update.items()} for update in stacked]
        updates = [[{key: values[m] for key, values in update.items()} for update in listed]
                   for m in range(members)]
        zero_variance = (std == 0).sum((-2, -1)).tolist()
        for m in range(members):
            histories[m].append({"step": step, "rows": rows[m],
                                 "zero_variance_groups": int(zero_variance[m]),
                                 "updates": updates[m]})
        if on_step is not None:
            on_step(step)
    for tensor in params.values():
        tensor.requires_grad_(False)
    return histories


@torch.no_grad()
def evaluate(params: Mapping[str, torch.Tensor], net: Net, tables: Tables,
             plans: Sequence[Plan], seeds: torch.Tensor,
             keep_rows: bool = True) -> list[dict[str, Any]]:
    """Greedy and sampled answers of every member on every split, in the exact engine's
    record form; the sampled draws come from stream EVALUATION + split index, step 0: every
    stage of a seed answers with the same draws, as in the exact engine, so stages are
    compared on common random numbers."""
    plan = plans[0]
    device = seeds.device
    temperature = per_member(plans, "temperature", device)
    eos, pad = tables.tokenizer.eos_id, tables.tokenizer.pad_id
    members = seeds.shape[0]
    results: list[dict[str, Any]] = [{} for _ in range(members)]
    for split_index, (split, pairs) in enumerate(tables.splits.items()):
        prompts = tables.prompts[split][None].expand(members, -1, -1)
        greedy, gmask = decode(params, net, prompts, plan.max_new_tokens, temperature,
                               seeds, counter.EVALUATION + split_index, 0, eos, pad,
                               greedy=True)
        samples = plan.eval_samples
        sampled, smask = decode(params, net, prompts, plan.max_new_tokens,
                                temperature, seeds, counter.EVALUATION + split_index,
                                0, eos, pad, repeat=samples)
        repeated_pairs = [p for p in pairs for _ in range(samples)]
        if not keep_rows:  # a benchmark of the computation alone
            continue
        greedy_rows = all_rows(tables, greedy, gmask, [pairs] * members)
        sampled_rows = all_rows(tables, sampled, smask, [repeated_pairs] * members)
        for m in range(members):
            results[m][split] = {"greedy": greedy_rows[m], "sampled": sampled_rows[m]}
    return results
