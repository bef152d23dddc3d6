"""Episodes at the token level: the policy's turns sampled, tool outputs spliced in as
tokens, and the log-probabilities of the update computed exactly as the rollout's.

Every sequence of a batch moves one token per step, in lockstep: at a position the policy
writes (its token is sampled, and counts in the mask that every RL term reads), or the
environment does (the next token of a tool's output block, forced; masked out of the loss,
the KL and the entropy: the policy never chose it), or the episode is over (pad). When a
turn's text ends with a call, or EOS, or the turn's token budget is spent,
:class:`~postlab.tasks.episodes.EpisodeRun` decides what follows.

Zero train/rollout mismatch by construction: the rollout reads its logits from the
policy's ``start`` over the prompts and one ``advance`` per position; the update
(:func:`replay_log_dist`) makes the same calls on the same tensors in the same order, so
each of its logits is computed as the one the token was sampled from, bit for bit. (A
transformer's cached and uncached passes differ in rounding; re-reading the sequence in one
pass, as single-answer training does, would differ from the sampler's logits.) The tokens
are the ones sampled, never a re-tokenised transcript, and a tool's output is encoded on
its own, as the rollout spliced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from postlab.policies import Policy
from postlab.policies.decoding import forward_context, sampler
from postlab.tasks.episodes import ANSWERED, EpisodeRun


@dataclass
class EpisodeBatch:
    """A batch of episodes: ``tokens`` after each prompt (the policy's, the tools', pad),
    ``mask`` where the policy wrote (EOS included), ``logp`` the log-probability of each
    written token under the logits it was sampled from (0 elsewhere), and the record's
    rows ``[a, b, transcript, answered with EOS]``."""

    tokens: torch.Tensor
    mask: torch.Tensor
    logp: torch.Tensor
    rows: list[list[Any]]


class _Writer:
    """One sequence's side of the lockstep: its episode, the turn being written, and the
    output tokens still to be spliced in."""

    def __init__(self, run: EpisodeRun, tokenizer: Any, turn_tokens: int) -> None:
        self.run, self.tokenizer, self.turn_tokens = run, tokenizer, turn_tokens
        self.turn: list[int] = []
        self.forced: list[int] = []
        self.done = False

    def next(self, sampled: int) -> tuple[int, bool]:
        """This position's token and whether the policy wrote it."""
        if self.done:
            return self.tokenizer.pad_id, False
        if self.forced:
            token = self.forced.pop(0)
            self.done = not self.forced and self.run.ended is not None
            return token, False
        if sampled == self.tokenizer.eos_id:
            self.run.end_turn(self.tokenizer.decode(self.turn), eos=True)
            self.done = True
            return sampled, True
        self.turn.append(sampled)
        text = self.tokenizer.decode(self.turn)
        if self.run.call_in(text) is not None or len(self.turn) >= self.turn_tokens:
            block = self.run.end_turn(text, eos=False)
            self.turn = []
            if block is None:
                self.done = True
            else:
                self.forced = list(self.tokenizer.encode(block))
        return sampled, True


@torch.no_grad()
def generate_episodes(model: Policy, task: Any, pairs: Sequence[Sequence[int]],
                      turn_tokens: int, temperature: float, generator: torch.Generator | None,
                      greedy: bool = False) -> EpisodeBatch:
    """Episodes of the questions ``pairs`` (``task`` is an agent task: its tools and
    budgets); each turn writes at most ``turn_tokens`` tokens, EOS included. The sampler
    draws for every row at every position (one draw a row, in row order), as the
    single-answer decode does, whatever the row is doing there."""
    tokenizer = model.tokenizer
    writers = [_Writer(task.start(pair), tokenizer, turn_tokens) for pair in pairs]
    choose = sampler(temperature, generator, greedy)
    with forward_context(model):
        logits, cache = model.start(model.prompts(pairs))
    columns, written, logps = [], [], []
    position = 0
    while True:
        logits = logits.float()
        sampled = choose(logits, position)
        steps = [writer.next(token) for writer, token in zip(writers, sampled.tolist(),
                                                              strict=True)]
        column = torch.tensor([token for token, _ in steps], device=logits.device)
        mine = torch.tensor([own for _, own in steps], device=logits.device)
        chosen = logits.log_softmax(-1).gather(-1, column[:, None]).squeeze(-1)
        columns.append(column)
        written.append(mine)
        logps.append(torch.where(mine, chosen, torch.zeros_like(chosen)))
        if all(writer.done for writer in writers):
            break
        with forward_context(model):
            logits, cache = model.advance(column[:, None], cache)
        position += 1
    rows = []
    for pair, writer in zip(pairs, writers, strict=True):
        episode = writer.run.episode()
        rows.append([pair[0], pair[1], episode.context(), episode.ended == ANSWERED])
    return EpisodeBatch(torch.stack(columns, 1), torch.stack(written, 1),
                        torch.stack(logps, 1), rows)


def replay_log_dist(model: Policy, prompts: torch.Tensor,
                    tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (seq, len, vocab) at each position of episodes' ``tokens``, from
    the calls the rollout made (``start``, then ``advance`` one position at a time), so
    they are the sampler's bit for bit; with gradients when the caller has them on."""
    with model.autocast():
        logits, cache = model.start(prompts)
        steps = [logits]
        for position in range(tokens.shape[1] - 1):
            logits, cache = model.advance(tokens[:, position:position + 1], cache)
            steps.append(logits)
    return torch.stack(steps, 1).float().log_softmax(-1)
