"""Reading runs from a script: ``verify``, ``report``, ``compare``, ``plot`` and ``export``.

Every reader opens a run through :func:`postlab.records.opened.open_run` (the same checks
everywhere), computes with :mod:`postlab.analysis`, and renders with :mod:`postlab.render`;
files are published whole (a new file or folder appears complete, or not at all) and an
existing output is never overwritten.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.api import environment
from postlab.errors import RecordDoesNotFit, UserError
from postlab.records.opened import (
    OpenedRun,
    check_whole,
    open_run,
    refuse,
    refuse_each,
)

if TYPE_CHECKING:
    from postlab.analysis.results import Analysis
    from postlab.analysis.versions import Comparison
    from postlab.plan.schema import Plan
    from postlab.records.models import SeedEntry
    from postlab.runs.verdicts import Check


def require_report_extra() -> None:
    """Intervals and figures need the report extra; refused in one line without it."""
    import importlib.util

    missing = [m for m in ("matplotlib", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"this report needs {', '.join(missing)}: "
                        "pip install 'postlab[report]'")


def check_split(opened: OpenedRun, split: str) -> None:
    """The split must be one of the plan's, and every stage of the record must hold it."""
    from postlab.records.conformance import each_seed

    if split not in opened.plan.model.split:
        raise UserError(f"--split {split}: the plan's splits are "
                        f"{', '.join(opened.plan.model.split)}")
    each_seed(opened.record, functools.partial(_split_missing, split),
              functools.partial(_no_split, opened.source))


def _split_missing(split: str, run: SeedEntry) -> list[str]:
    return [f"seed {run.seed}, stage {stage} has no {split!r} split"
            for stage, splits in run.evaluations.items() if split not in splits]


def _no_split(source: Path, problems: list[str]) -> None:
    raise UserError(f"{source}: {problems[0]}")


def analyse(opened: OpenedRun, split: str = "test",
            exploratory: dict[str, Any] | None = None) -> Analysis:
    """Everything a report shows about one held-out split, computed once (the record's
    checks ride on its one walk over the seeds). ``exploratory``: hypotheses given after
    training (a checked hypotheses section), decided apart from the registered ones."""
    import json

    from postlab.analysis.aggregate import analyse as compute
    from postlab.analysis.aggregate import record_facts
    from postlab.records.conformance import run_plan_problems, seed_list_problems
    from postlab.records.opened import checked_tables

    key = ("analysis", split, json.dumps(exploratory, sort_keys=True))
    if key in opened.computed:
        return opened.computed[key]
    check_split(opened, split)
    require_report_extra()
    what = "record does not fit the plan"
    refuse(seed_list_problems(opened.record, opened.plan.model), opened.source, what,
           RecordDoesNotFit)
    refuse_each(opened.record, functools.partial(run_plan_problems, plan=opened.plan.model),
                opened.source, what, RecordDoesNotFit)
    analysis = compute(opened.record, opened.plan.model, registration=opened.registration,
                       exploratory=exploratory, facts=record_facts(
                           opened.record, opened.plan.model, checked_tables(opened)))
    opened.computed[key] = analysis
    return analysis


def finding_lines(opened: OpenedRun, analysis: Analysis, lang: str, split: str) -> list[str]:
    """What the run's numbers say, in words, each with its interval."""
    from postlab.analysis.findings import findings
    from postlab.records.opened import checked_tables
    from postlab.render.sentences import sentence

    key = ("findings", split, id(analysis))
    if key not in opened.computed:  # the text report and the page say the same findings
        opened.computed[key] = (analysis, findings(analysis, opened.record, opened.plan.model,
                                                   split, lambda: checked_tables(opened)))
    return [sentence(f, lang) for f in opened.computed[key][1]]


def figure_notices(lang: str) -> list[str]:
    """One line, printed and shown on the page, when figures cannot use the language."""
    from postlab.render.figure_words import FIGURE_WORDS
    from postlab.render.figures import figure_language

    if figure_language(lang)[0] == lang:
        return []
    return [FIGURE_WORDS[lang]["cjk_missing"]]


def refuse_existing(path: Path | None) -> None:
    if path is not None and (path.exists() or path.is_symlink()):
        raise UserError(f"{path}: already exists; postlab never overwrites an output")


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    """Every check of a run, the code path it re-evaluated on, and the verdict's exit code
    (0 verified, 1 a check failed or a required part is missing)."""

    checks: list[Check]
    code_path: str
    text: str
    code: int

    @property
    def verified(self) -> bool:
        return self.code == 0


def verify(run: str | Path | None = None, *, expect: str | None = None,
           say: Callable[[str], None] | None = None, quick: bool = False) -> VerifyResult:
    """Re-check a run folder or record (default: the bundled run) on the record's own CPU
    code path: hashes, re-evaluation of every checkpoint, summary, counts, digests, the
    fingerprint (against ``expect`` if given), environment and source. ``quick``: all but
    the re-evaluation, which the result says it skipped."""
    from postlab.records.fingerprint import check_expected
    from postlab.records.record import load_record, locate_run

    expected = None if expect is None else check_expected(expect)
    files = locate_run(None if run is None else Path(run))
    record = load_record(files.record)
    # Re-evaluation recomputes bits, so it runs on the record's code path where it can.
    note = environment.pin_for_record(record, None, strict=False)
    if say is not None:
        say(note)  # before the checks, which take a while
    if record.device == "cuda":
        from postlab.machine.device import prepare

        prepare("cuda")  # re-evaluates on CUDA where it exists; before CUDA initialises
    from postlab.runs.remembered import verify_and_remember
    from postlab.runs.verdicts import render_checks
    from postlab.runs.verify import verify_run

    # the checks a run's page shows are these without an expected fingerprint: remembered
    checks = (verify_run(files, record, expect=expected, quick=quick)
              if expected is not None or quick else verify_and_remember(files, record))
    text, code = render_checks(checks)
    return VerifyResult(checks=checks, code_path=note, text=text, code=code)


def pin_for_page(target: Path | None) -> None:
    """A run's page shows its verification, which re-evaluates checkpoints: on the record's
    code path, pinned from the record alone, before the plan is read (reading it loads torch)."""
    from postlab.records.record import load_record, locate_run

    environment.pin_for_record(load_record(locate_run(target).record), None, strict=False)


@dataclass(frozen=True, kw_only=True)
class CompareResult:
    """Versions compared on every held-out metric, paired by seed with the base version."""

    comparison: Comparison
    left_out: list[str]  # versions of a sweep without a completed seed yet
    html: Path | None


def _plan_changes(base: Plan, plan: Plan) -> dict[str, Any]:
    """The keys a plan's file sets differently from the base's (the automatic ones left
    out), with the values as written."""
    skip = {"version", "date", "parent"}
    before, after = base.data(), plan.data()
    return {key: after.get(key) for key in sorted(before.keys() | after.keys())
            if key not in skip and before.get(key) != after.get(key)}


def compare(runs: Sequence[str | Path], *, split: str | None = None, lang: str = "en",
            html: str | Path | None = None,
            say: Callable[[str], None] | None = None) -> CompareResult:
    """Compare a sweep folder's versions, or two or more run folders (the first is the base):
    each held-out metric's mean and interval per version, and its difference from the base
    paired by seed; with ``html``, also write the page with figures (a new file)."""
    from postlab.analysis.versions import VersionInput
    from postlab.analysis.versions import compare as compute
    from postlab.sweeps.folder import is_sweep, read_index

    page_path = None if html is None else Path(html)
    refuse_existing(page_path)
    folders: list[tuple[str, Path, dict | None]] = []
    left_out = []
    for given in runs:
        path = Path(given)
        if not is_sweep(path):
            folders.append((path.name, path, None))
            continue
        versions = read_index(path)[1]
        if not (path / versions[0].name / "record.json").is_file():
            raise UserError(f"{path}: the base version has no completed seed yet; finish the "
                            "sweep with 'postlab sweep --resume'")
        for version in versions:
            if (path / version.name / "record.json").is_file():
                folders.append((version.name, path / version.name, version.changes))
            else:
                left_out.append(str(path / version.name))
                if say is not None:
                    say(f"{path / version.name}: no completed seed yet; left out")
    names = [name for name, _, _ in folders]
    if len(folders) < 2:
        raise UserError("compare needs at least two versions: a sweep folder, or two or more "
                        "run folders")
    if len(set(names)) != len(names):
        raise UserError(f"two versions are named alike ({', '.join(names)}); give folders "
                        "with distinct names")
    require_report_extra()
    inputs = []
    base_plan: Plan | None = None
    held_out: list[str] | None = None
    for name, folder, changes in folders:
        opened = open_run(folder, check_rows=False)
        check_whole(opened)
        splits = [s for s in opened.plan.model.split if s != "train"]
        if split is not None and split not in splits:
            raise UserError(f"--split {split}: {opened.source.parent} has held-out splits "
                            f"{', '.join(splits)}")
        analysis = analyse(opened, split or splits[-1])
        if base_plan is None:
            base_plan, held_out = opened.plan.model, splits
        if changes is None:
            changes = _plan_changes(base_plan, opened.plan.model)
        inputs.append(VersionInput(name=name, changes=changes, analysis=analysis,
                                   plan=opened.plan.model))
    result = compute(inputs, held_out or ("test",))
    if page_path is not None:
        from postlab.jsonio import publish_bytes
        from postlab.render import comparison as render

        shown = held_out or ["test"]
        figure_split = split or ("test" if "test" in shown else shown[-1])
        figures = render.draw_figures(result, lang, figure_split, svg=False)
        publish_bytes(page_path, render.render_html(result, figures, lang, split).encode())
    return CompareResult(comparison=result, left_out=left_out, html=page_path)


@dataclass(frozen=True, kw_only=True)
class PlotResult:
    """The figure folder written, how many files it holds, and any line about the labels'
    language (no font for it here)."""

    out_dir: Path
    files: int
    notices: list[str]


def plot(run: str | Path | None = None, out_dir: str | Path | None = None, *,
         overwrite: bool = False, split: str = "test", lang: str = "en") -> PlotResult:
    """Write a run's figures (PNG and SVG) into ``out_dir`` (default: RUN/figures) as one new
    folder; ``overwrite`` replaces a folder holding only figures an earlier plot wrote."""
    from postlab.analysis.samples import pair_grids
    from postlab.api.publish import check_only_figures, publish_folder, replace_folder
    from postlab.records.opened import checked_tables
    from postlab.render.figures import FIGURE_NAMES, draw_figures

    if run is None and out_dir is None:
        raise UserError("--out-dir is required when plotting the bundled run")
    opened = open_run(None if run is None else Path(run), check_rows=False)
    from postlab.render.labels import starting_words

    with starting_words(opened.plan.model):
        check_whole(opened)
        out = Path(out_dir) if out_dir is not None else opened.source.parent / "figures"
        replace = out.exists() or out.is_symlink()
        if replace:
            if not overwrite:
                raise UserError(f"{out}: already exists; postlab never overwrites an output "
                                "(--overwrite replaces figures an earlier plot wrote)")
            check_only_figures(out, FIGURE_NAMES)
        analysis = analyse(opened, split)
        figures = draw_figures(analysis, lang, split, pair_grids(
            opened.record, opened.plan.model, tables=checked_tables(opened)))
        contents = {f"{f.name}.{ext}": getattr(f, ext)
                    for f in figures for ext in ("png", "svg")}
        if replace:
            replace_folder(out, contents, FIGURE_NAMES)
        else:
            publish_folder(out, contents)
        return PlotResult(out_dir=out, files=len(contents), notices=figure_notices(lang))


def export(run: str | Path | None, out_dir: str | Path, *, format_: str = "parquet",
           say: Callable[[str], None] | None = None) -> tuple[Path, int, list[str]]:
    """Every raw output of a run, or of every version of a sweep, as tidy tables with
    ``schema.json``, published as one new folder; returns it, the number of tables, and the
    sweep versions left out (no completed seed yet)."""
    from postlab.api.publish import staged_folder
    from postlab.export.files import write_export
    from postlab.export.loaded import LoadedRun, load_run, load_sweep, require_arrow
    from postlab.sweeps.folder import is_sweep

    out = Path(out_dir)
    refuse_existing(out)
    if not out.parent.is_dir():
        raise UserError(f"{out}: folder {out.parent} does not exist")
    require_arrow()
    target = None if run is None else Path(run)
    left_out: list[str] = []
    if target is not None and is_sweep(target):
        runs, left_out = load_sweep(target)
        for name in left_out if say is not None else ():
            say(f"{name}: no completed seed yet; left out")
        chosen: list[tuple[str | None, LoadedRun]] = list(runs)
    else:
        chosen = [(None, load_run(target))]
    with staged_folder(out) as staging:
        tables = write_export(staging, chosen, format_)
    return out, tables, left_out


@dataclass(frozen=True, kw_only=True)
class Samples:
    """A run's answers chosen by :func:`samples`' filters, ready to be walked (every judged
    answer, in record order) or tallied (per stage and kind)."""

    run: OpenedRun
    #: the stages (or, for rollouts, the RL arms) the run has, in record order
    stages: list[str]
    #: where the answers come from, in words: "test split, sampled" or "training rollouts"
    where: str
    filters: dict[str, Any]

    def answers(self) -> Iterator[Any]:
        """Every chosen answer (``analysis.samples.Sample``), judged by every contract; the
        chosen seeds' checks run before the first is given."""
        from postlab.analysis.samples import iter_samples
        from postlab.records.conformance import settle

        chosen = iter_samples(self.run.record, self.run.plan.model, **self.filters)
        settle(self.run.record, self.filters["seeds"])
        yield from chosen

    def tallies(self) -> dict[tuple[str, str], Any]:
        """The chosen answers counted per stage and kind (columnar)."""
        from postlab.analysis.samples import answer_tallies
        from postlab.records.opened import checked_tables

        return answer_tallies(self.run.record, self.run.plan.model, checked_tables(self.run),
                              **self.filters)


def samples(run: str | Path | None, *, stages: Sequence[str] = (), split: str | None = None,
            decoding: str | None = None, kind: str | None = None, seeds: Sequence[int] = ()
            ) -> Samples:
    """The answers a run recorded, chosen by stage, split (``"rollouts"``: the RL arms'
    training rollouts; default the test split), decoding (default sampled), kind ("correct",
    "gamed" or "wrong") and seed; every filter is checked against the run before anything is
    read."""
    from postlab.plan.arms import plan_contracts
    from postlab.records.opened import check_whole, open_run

    if decoding is not None and split == "rollouts":
        raise UserError("--decoding is for evaluation splits; training rollouts are sampled")
    opened = open_run(None if run is None else Path(run), check_rows=False)
    check_whole(opened)
    record = opened.record
    rollouts = split == "rollouts"
    chosen_split = None if rollouts else (split or "test")
    if chosen_split is not None:
        check_split(opened, chosen_split)
    # every seed of a record that fits its plan has the same stages and arms: the first's
    first = record.runs[0] if record.runs else None
    all_stages = [] if first is None else list(first.evaluations)
    arms = [] if first is None else [s for s in all_stages if s in first.arms]
    known = arms if rollouts else all_stages
    for stage in stages:
        if stage not in known:
            what = "RL arms with rollouts" if rollouts else "stages"
            raise UserError(f"--stage {stage}: the run's {what} are {', '.join(known) or 'none'}")
    recorded = record.seed_order()
    for seed in seeds:
        if seed not in recorded:
            raise UserError(f"--seed {seed}: the run's seeds are "
                            f"{', '.join(map(str, recorded))}")
    contracts = plan_contracts(opened.plan.model)
    if kind == "gamed" and len(contracts) < 2:
        raise UserError(f"--filter gamed: this plan's task is judged by one contract "
                        f"({contracts[0]}), so no answer can be paid and wrong")
    filters = {"stages": list(stages) or None, "split": chosen_split,
               "decoding": None if rollouts else decoding or "sampled",
               "kinds": None if kind is None else [kind], "seeds": list(seeds) or None,
               "rollouts": rollouts}
    where = ("training rollouts" if rollouts
             else f"{chosen_split} split, {decoding or 'sampled'}")
    return Samples(run=opened, stages=known, where=where, filters=filters)


def exercises(number: int | None = None, run: str | Path | None = None) -> list[Any]:
    """The worked answers arithmetic can show (``analysis.exercises.Exercise``: number,
    title, values, lines): answer ``number``, or every one that needs no run; answers 8 and 9
    computed on ``run`` (8's default: the bundled run; 9 needs a run whose arms are
    pipelines). An answer that is an argument, not arithmetic, comes as an exercise with no
    lines whose title says so."""
    from postlab.analysis.exercises import DISCURSIVE, EXERCISES, RUN_EXERCISES, Exercise

    if run is not None and number not in RUN_EXERCISES:
        raise UserError(f"RUN is for answers {' and '.join(map(str, RUN_EXERCISES))} only")
    if number == 9 and run is None:
        raise UserError("answer 9 is computed on a run: postlab exercises 9 RUN, with RUN a "
                        "run whose arms are pipelines (train one with "
                        "examples/arms-pipelines.json)")
    if number in RUN_EXERCISES:
        from postlab.records.opened import check_whole, checked_tables, open_run
        from postlab.records.record import bundled_run_dir

        opened = open_run(Path(run) if run is not None else bundled_run_dir(),
                          check_rows=False)
        check_whole(opened)
        require_report_extra()
        return [RUN_EXERCISES[number](opened.record, opened.plan.model, opened.source.parent,
                                      tables=lambda: checked_tables(opened))]
    answers = []
    for each in sorted(EXERCISES) if number is None else [number]:
        if each in DISCURSIVE:
            answers.append(Exercise(number=each, title=f"an argument, not arithmetic "
                                                       f"({DISCURSIVE[each]})", values={}))
            continue
        if each not in EXERCISES:
            raise UserError(f"no answer {each}; answers are numbered 1 to 10")
        answers.append(EXERCISES[each]())
    return answers
