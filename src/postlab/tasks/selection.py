"""Which demonstrations an SFT step trains on (answer 9: random against by difficulty).

A selection rule draws each step's batch of training questions. ``random`` is the teaching
plan's: ``sft_batch`` draws with replacement from the whole train split, every step. The
others order the train split by the task's difficulty (:meth:`Task.difficulty`; ties keep the
plan's order) and draw as many, with replacement, from part of it, so an arm that uses one
trains on exactly as many demonstrations in as many steps as the SFT it is compared with:

- ``easiest-first``: a curriculum. Step t of T draws from the easiest ceil(N (t+1) / T)
  questions, so the pool grows from the easiest to the whole split by the last step
  (Bengio et al. 2009).
- ``hardest-only``: every step draws from the hardest questions: the hardest difficulty levels
  that together hold at most half of the split, and always the hardest level (a level is
  never split; for the teaching plan, the sums with a carry).

Rules are a registry, so a new one is one function.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from postlab.registry import Registry

Pair = Sequence[int]


@dataclass(frozen=True)
class Ordered:
    """The train split as a rule draws from it, with each question's difficulty."""

    pairs: Sequence[Pair]
    levels: Sequence[tuple[float, ...]]


#: (the split, random stream, step from 0, steps, batch) -> the step's batch
Rule = Callable[[Ordered, random.Random, int, int, int], list[Pair]]

SELECTIONS: Registry[Rule] = Registry("demonstration selection")
#: One line each, for the plan schema and reports.
DESCRIPTIONS = {
    "random": "at random from the whole train split (the teaching plan's)",
    "easiest-first": "easiest first: a pool growing from the easiest questions to the whole "
                     "split over the steps",
    "hardest-only": "only the hardest questions: the hardest difficulty levels holding at "
                    "most half of the train split (at least the hardest level)",
}


@SELECTIONS.register("random")
def random_selection(split: Ordered, rng: random.Random, step: int, steps: int, batch: int
                     ) -> list[Pair]:
    """The teaching plan's rule, on the split in the plan's order: the reference's draws."""
    return rng.choices(split.pairs, k=batch)


@SELECTIONS.register("easiest-first")
def easiest_first(split: Ordered, rng: random.Random, step: int, steps: int, batch: int
                  ) -> list[Pair]:
    pool = max(1, math.ceil(len(split.pairs) * (step + 1) / steps))
    return rng.choices(split.pairs[:pool], k=batch)


@SELECTIONS.register("hardest-only")
def hardest_only(split: Ordered, rng: random.Random, step: int, steps: int, batch: int
                 ) -> list[Pair]:
    return rng.choices(split.pairs[hardest_start(split):], k=batch)


def hardest_start(split: Ordered) -> int:
    """Where the hardest levels begin that hold at most half of the split (at least the
    hardest level, however large)."""
    count = len(split.pairs)
    start = count
    while start > 0:
        level = split.levels[start - 1]
        below = start - 1
        while below > 0 and split.levels[below - 1] == level:
            below -= 1
        if start < count and count - below > count // 2:
            break
        start = below
    return start


def order(pairs: Sequence[Pair], difficulty: Callable[[Pair], tuple[float, ...]],
          rule: str) -> Ordered:
    """The train split as ``rule`` draws from it: as given for ``random``, else easiest
    first (a stable sort: equal difficulty keeps the plan's order)."""
    SELECTIONS[rule]  # an unknown rule fails here, listing the known ones
    if rule == "random":
        return Ordered(pairs=list(pairs), levels=())  # difficulty is not asked
    ranked = sorted(pairs, key=difficulty)
    return Ordered(pairs=ranked, levels=[difficulty(pair) for pair in ranked])
