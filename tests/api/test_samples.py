"""A run's answers from a script: ``postlab.samples`` checks its filters against the run, then
gives the chosen answers judged, or their tallies, as ``postlab samples`` prints them."""

from __future__ import annotations

import itertools

import pytest

import postlab
from postlab.errors import UserError


def test_the_bundled_runs_gamed_answers_walked_and_tallied():
    chosen = postlab.samples(None, stages=["substring"], kind="gamed", seeds=[11])
    assert chosen.where == "test split, sampled" and "substring" in chosen.stages
    first = list(itertools.islice(chosen.answers(), 5))
    assert first and all(s.kind == "gamed" and s.stage == "substring" and s.seed == 11
                         for s in first)
    tallies = chosen.tallies()
    assert set(tallies) == {("substring", "gamed")}
    assert tallies["substring", "gamed"].total == sum(1 for _ in chosen.answers())


@pytest.mark.parametrize("filters, words", [
    ({"stages": ["nope"]}, "--stage nope: the run's stages are initial, strict, substring"),
    ({"seeds": [5]}, "--seed 5: the run's seeds are 11, 22, 33"),
    ({"split": "rollouts", "decoding": "greedy"}, "--decoding is for evaluation splits"),
    ({"split": "rollouts", "stages": ["initial"]}, "the run's RL arms with rollouts are"),
])
def test_a_filter_the_run_cannot_meet_is_refused(filters, words):
    with pytest.raises(UserError, match=words):
        postlab.samples(None, **filters)
