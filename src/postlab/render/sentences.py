"""Findings in words: each finding's template filled with its own numbers and intervals."""

from __future__ import annotations

from postlab.analysis.findings import DOWN, UP, Finding
from postlab.analysis.intervals import Interval
from postlab.analysis.samples import Example
from postlab.render.labels import FINDING_TEMPLATES, brief, shown_episode, stage_label
from postlab.tasks.contracts import PARTIAL_CREDIT, describe


def rate_text(value: Interval, digits: int = 3) -> str:
    """A rate with its interval: ``0.049 [0.020, 0.107]``."""
    if value.low is None or value.high is None:
        return f"{value.mean:.{digits}f}"
    return f"{value.mean:.{digits}f} [{value.low:.{digits}f}, {value.high:.{digits}f}]"


def change_text(value: Interval, digits: int = 3) -> str:
    """A signed difference with its interval: ``+0.004 [-0.021, +0.029]``."""
    if value.low is None or value.high is None:
        return f"{value.mean:+.{digits}f}"
    return f"{value.mean:+.{digits}f} [{value.low:+.{digits}f}, {value.high:+.{digits}f}]"


#: Values that are differences: signed unless a rising or falling template states the sign.
SIGNED = frozenset({"change", "difference"})


def _negated(value: Interval) -> Interval:
    return Interval(per_seed=tuple(-v for v in value.per_seed), mean=-value.mean,
                    low=None if value.high is None else -value.high,
                    high=None if value.low is None else -value.low)


def _example(example: Example | None, where: str, words: dict[str, str]) -> str:
    if example is None:
        return ""
    key = "example" if where == "held_out" else "example_rollouts"
    return words[key].format(prompt=brief(example.prompt), text=shown_episode(example.text),
                             expected=example.expected, count=example.count)


#: Up to this many seeds a finding lists each seed's onset; beyond, it summarises them (a
#: 256-seed study's sentence listed 256 steps).
LISTED_ONSETS = 12


def _onsets(onsets: tuple[tuple[int, int | None], ...], words: dict[str, str]) -> str:
    found = [(seed, step) for seed, step in onsets if step is not None]
    if not onsets:
        return ""
    if not found:
        return words["onsets_none"]
    if len(onsets) > LISTED_ONSETS:
        import numpy as np

        steps_found = np.array([step for _, step in found], dtype=np.float64)
        low, median, high = np.percentile(steps_found, [25, 50, 75])
        summary = words["onset_summary"].format(
            median=f"{median:g}", low=f"{low:g}", high=f"{high:g}",
            first=int(steps_found.min()))
        return words["onsets_found"].format(found=len(found), seeds=len(onsets),
                                            steps=summary)
    steps = words["list_separator"].join(
        words["onset_step"].format(seed=seed, step=step) if step is not None
        else words["onset_none"].format(seed=seed) for seed, step in onsets)
    return words["onsets_found"].format(found=len(found), seeds=len(onsets), steps=steps)


def sentence(finding: Finding, lang: str) -> str:
    """The finding in ``lang``: its template, with rates, changes and names put in."""
    words = FINDING_TEMPLATES[lang]
    key = finding.key if finding.direction is None else f"{finding.key}:{finding.direction}"
    values = dict(finding.values)
    fields: dict[str, object] = {}
    for name, value in values.items():
        if not isinstance(value, Interval):
            fields[name] = value
        elif name not in SIGNED:
            fields[name] = rate_text(value)
        elif finding.direction in (UP, DOWN):
            # the template's verb carries the sign ("lowered by 0.018"), so the size is shown
            fields[name] = rate_text(value if finding.direction == UP else _negated(value))
        else:
            fields[name] = change_text(value)
    if "stage" in values:
        fields["stage"] = stage_label(values["stage"], lang)
    if "control" in values:
        fields["control"] = stage_label(values["control"], lang)
    if "split" in values:
        held = "where_train" if values["split"] == "train" else "where_held_out"
        fields["where"] = words[held].format(split=values["split"])
    if "seeds" in values:
        count = values["seeds"]
        fields["seeds"] = words["seeds_one" if count == 1 else "seeds_many"].format(n=count)
    if "contract" in values:
        fields["contract"] = describe(values["contract"], lang).name
    if finding.key == "hypothesis":
        fields["standing"] = words[f"standing_{values['standing']}"].format(
            time=values.get("registered_at", ""))
    if finding.key == "gaming":
        if values["contract"] in PARTIAL_CREDIT:  # the share counts what each answer is paid
            fields["share"] = f"{fields['share']}{words['share_partial']}"
        fields["example"] = _example(values["example"], values["example_from"], words)
        fields["onsets"] = _onsets(values["onsets"], words)
    return words[key].format(**fields).strip()
