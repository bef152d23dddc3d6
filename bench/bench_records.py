"""Records at scale: train the teaching plan on N seeds with the ensemble engine, then time
every reader of the record with its peak memory, at several N, and extrapolate.

    python bench/bench_records.py [--sizes 100,300,1000] [--baseline-up-to 300]
                                  [--baseline-source CHECKOUT] [--assemble 10000]
                                  [--workers N] [--device cpu|cuda] [--keep DIR]
                                  [--lanes 1|2] [--json FILE]

For each size N, ``postlab run --engine ensemble`` trains N teaching seed-runs (SFT, both RL
arms, every evaluation) into a run folder; then, each in its own process so its peak resident
memory is its own (``os.wait4``): ``verify --quick`` (every check but the checkpoints'
re-evaluation), ``verify`` (every check), ``report --format json``, ``report --html`` (figures
and the page, which shows the verification just made rather than repeating it), ``export``
(Parquet), ``compare`` (the run against itself) and ``samples``. It states the bytes on disk
per seed-run (the record's files, and the whole folder with checkpoints), then edits one byte
of one chunk and checks that ``verify`` names that chunk.

Readers prove each seed (its rows fit the plan, its digests recompute) unless a proof of
the same state is remembered (``postlab.records.proofs``). So ``verify --quick``, which always
proves and remembers, runs first, beside a JSON report with a cache folder of its own
(``report json (first read)``: what a reader costs when nothing is remembered); every other
reader then finds the proof. With ``--lanes 2`` the readers run two at a time (after those
two: ``verify``, the page, which shows its checks, and ``samples`` in one lane; the JSON
report, ``export`` and ``compare`` in the other), for a machine with two cores to spare: each
reader is one process on one core, so its peak memory is unchanged and its time is measured
beside one other reader's.

Baseline, side by side: up to ``--baseline-up-to`` seeds, the same readers of an earlier
version (``--baseline-source``: a checkout whose ``src`` the commands then run from) read the
same record, one at a time after this version's, and the ratio of their times is printed.
Without ``--baseline-source``, the record rewritten in the one-document layout earlier
versions wrote is read by ``report --format json`` and ``export`` instead, so the memory of
the two layouts is compared.

``--assemble M``: a record of M seed-runs is assembled from the largest trained one
(``bench/assemble_records.py``: its seeds copied under new numbers, every digest, manifest
entry, summary and fingerprint recomputed) and read too; it is verified ``--quick`` only
(its copies' checkpoints would not give their rows again) and has no page, which would
re-evaluate them. Last, a least-squares line through each command's time and peak memory
against the trained sizes gives the figure at 10,000 seed-runs, and the growth per 1,000 from
the largest trained size to the assembled one is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

POSTLAB = [sys.executable, "-m", "postlab"]
TARGET = 10_000


def timed(command: list[str], *, expect: int = 0, source: Path | None = None,
          cache: Path | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak resident MiB (this process alone, ``ru_maxrss``) and stdout;
    ``source``: a checkout of another postlab version whose ``src`` runs the command;
    ``cache``: a cache folder of its own (nothing remembered by the other readers)."""
    start = time.perf_counter()
    env = {**os.environ,
           **({} if source is None else {"PYTHONPATH": str(source.resolve() / "src")}),
           **({} if cache is None else {"POSTLAB_CACHE_DIR": str(cache)})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode != expect:
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}, not {expect}:\n"
                         f"{stderr[-3000:]}{stdout[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, stdout


def teaching_plan(path: Path, seeds: int) -> Path:
    from postlab.plan.frozen import freeze
    from postlab.plan.frozen import teaching_plan as plan

    freeze(path, plan() | {"seeds": list(range(1, seeds + 1))})
    return path


def folder_bytes(folder: Path, pattern: str = "**/*") -> int:
    return sum(p.stat().st_size for p in folder.glob(pattern) if p.is_file())


def as_one_document(run: Path, out: Path) -> Path:
    """A copy of ``run`` whose record is one JSON document, as earlier versions wrote it.

    Made in a process of its own: a child's peak resident memory (``ru_maxrss``) counts the
    memory of the process that started it, so this one must stay small, and the record held
    whole here would have been counted in every reader measured after it."""
    subprocess.run([sys.executable, __file__, "--one-document", str(run), str(out)],
                   check=True)
    return out


def _write_one_document(run: Path, out: Path) -> None:
    from postlab.jsonio import dump_json
    from postlab.records.record import load_record, one_document

    shutil.copytree(run, out, ignore=shutil.ignore_patterns("rows"))
    record = load_record(run / "record.json")
    (out / "record.json").write_bytes(dump_json(one_document(record)))


def _twin(run: Path) -> Path:
    twin = run.with_name(f"{run.name}-twin")
    if not twin.exists() and run.exists():
        twin.symlink_to(run.name)
    return twin


#: The readers that run first, two at a time, and prove every seed: ``verify --quick``
#: (which remembers its proof for the readers after it) and a JSON report with a cache of
#: its own (a reader that finds no proof remembered: what any reader costs the first time).
FIRST = ("verify --quick", "report json (first read)")


def readers(run: Path, scratch: Path, *, assembled: bool = False) -> dict[str, list[str]]:
    """Each reader's command. An assembled record (``assemble_records.py``) is verified
    ``--quick``: its copies' checkpoints would not give their rows again, by design."""
    report = [*POSTLAB, "report", str(run), "--format", "json"]
    return {
        "verify --quick": [*POSTLAB, "verify", str(run), "--quick"],
        "report json (first read)": report,
        **({} if assembled else {"verify": [*POSTLAB, "verify", str(run)]}),
        "report json": report,
        **({} if assembled else {"report html": [
            *POSTLAB, "report", str(run), "--format", "json", "--html",
            str(scratch / "page.html")]}),
        "export": [*POSTLAB, "export", str(run), "--out-dir", str(scratch / "tables")],
        # the run against itself, under a second name (a link: compare refuses equal names)
        "compare": [*POSTLAB, "compare", str(run), str(_twin(run)), "--format", "json"],
        "samples": [*POSTLAB, "samples", str(run)],
    }


def lanes_of(names: list[str], lanes: int) -> list[list[str]]:
    """The readers in ``lanes`` sequences of about equal time (as measured at 150 seeds, less
    the walks since saved); the page follows ``verify`` in its lane, since it shows the
    checks that verify made."""
    if lanes == 1:
        return [names]
    second = [name for name in names if name in ("export", "compare", "report json")]
    return [[name for name in names if name not in second], second]


def measure(commands: dict[str, list[str]], lanes: int,
            figures: dict[str, dict[str, float]], scratch: Path) -> None:
    """Time each reader (its seconds and peak memory into ``figures``), ``lanes`` at a
    time: first :data:`FIRST`, which prove every seed, then the others, which find the proof
    ``verify --quick`` remembered."""
    def lane(names: list[str]) -> None:
        for name in names:
            own = scratch / "first-read-cache" if name == FIRST[1] else None
            if own is not None:
                shutil.rmtree(own, ignore_errors=True)
            seconds, mib, _ = timed(commands[name], cache=own)
            figures[name] = {"s": seconds, "mib": mib}
            print(f"  {name:<24} {seconds:8.1f} s  {mib:8.0f} MiB peak", flush=True)

    first = [name for name in FIRST if name in commands]
    rest = [name for name in commands if name not in FIRST]
    with ThreadPoolExecutor(lanes) as pool:
        for group in ([[name] for name in first] if lanes > 1 else [first],
                      lanes_of(rest, lanes)):
            for done in [pool.submit(lane, names) for names in group]:
                done.result()


def edited_chunk_caught(run: Path) -> str:
    """Flip one byte of one chunk in the middle of the record; verify must name it."""
    header = json.loads((run / "record.json").read_text())
    chunk = header["chunks"][len(header["chunks"]) // 2]
    path = run / chunk["file"]
    original = path.read_bytes()
    edited = bytearray(original)
    edited[len(edited) // 2] ^= 1
    try:
        path.write_bytes(bytes(edited))
        seconds, _, out = timed([*POSTLAB, "verify", str(run)], expect=1)
    finally:
        path.write_bytes(original)
    line = next(line for line in out.splitlines() if "row files" in line)
    if not line.startswith("FAIL") or chunk["file"] not in line:
        raise SystemExit(f"verify did not name the edited chunk {chunk['file']}: {line}")
    return f"{chunk['file']} of {len(header['chunks'])} chunks named by verify ({seconds:.1f} s)"


def fit(sizes: list[int], values: list[float]) -> tuple[float, float, float]:
    """Least-squares intercept and slope, and the largest residual as a share of its value."""
    n = len(sizes)
    mean_x, mean_y = sum(sizes) / n, sum(values) / n
    spread = sum((x - mean_x) ** 2 for x in sizes)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, values, strict=True))
             / spread) if spread else 0.0
    intercept = mean_y - slope * mean_x
    worst = max(abs(intercept + slope * x - y) / y for x, y in zip(sizes, values, strict=True))
    return intercept, slope, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--baseline-up-to", type=int, default=300)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    parser.add_argument("--lanes", type=int, choices=(1, 2), default=1,
                        help="readers run this many at a time (2: two cores to spare)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--baseline-source", type=Path,
                        help="a checkout of an earlier postlab: its readers run on the same "
                             "records, up to --baseline-up-to seeds, side by side")
    parser.add_argument("--assemble", type=int, default=0,
                        help="also read a record of this many seed-runs assembled from the "
                             "largest trained one (bench/assemble_records.py)")
    parser.add_argument("--one-document", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_document:
        _write_one_document(*args.one_document)
        return
    sizes = sorted(int(size) for size in args.sizes.split(","))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {args.workers} workers on {args.device}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-records-"))
    base.mkdir(parents=True, exist_ok=True)
    # verify's remembered checks (which the page shows) go with the run folders
    os.environ["POSTLAB_CACHE_DIR"] = str(base / "memo")
    results: dict[int, dict[str, dict[str, float]]] = {}
    try:
        for size in sizes:
            folder = base / f"seeds-{size}"
            run = folder / "run"
            if (run / "fingerprint.txt").is_file():
                # a finished run of an earlier invocation (--keep): its readers are measured
                # again, its training is not
                train, train_mib = float("nan"), float("nan")
                for stale in ("one-document", "one-document-twin", "old", "tables",
                              "page.html", "run-twin", "baseline", "first-read-cache"):
                    path = folder / stale
                    if path.is_symlink() or path.is_file():
                        path.unlink()
                    elif path.is_dir():
                        shutil.rmtree(path)
                print(f"\n{size} seed-runs: the run kept in {run} is read again "
                      "(training not measured in this invocation)")
            else:
                folder.mkdir()
                plan = teaching_plan(folder / "plan.json", size)
                train, train_mib, _ = timed([*POSTLAB, "run", "--plan", str(plan), "--out-dir",
                                             str(run), "--engine", "ensemble", "--workers",
                                             str(args.workers), "--device", args.device,
                                             "--quiet", "--allow-large"])
            rows = folder_bytes(run, "rows/*") + (run / "record.json").stat().st_size
            whole = folder_bytes(run)
            chunks = len(json.loads((run / "record.json").read_text())["chunks"])
            print(f"\n{size} seed-runs: trained in {train:.0f} s "
                  f"({size / train:.2f} seed-runs/s, main process peak {train_mib:.0f} MiB); "
                  f"record {rows / size / 1e3:.0f} KB per seed-run in {chunks} chunks, "
                  f"folder with checkpoints {whole / size / 1e3:.0f} KB per seed-run")
            figures = {"train": {"s": train, "mib": train_mib},
                       "bytes": {"record_per_seed": rows / size,
                                 "folder_per_seed": whole / size}}
            commands = readers(run, folder)

            measure(commands, args.lanes, figures, folder)
            if args.lanes > 1:
                print(f"  (readers measured {args.lanes} at a time)")
            if size <= args.baseline_up_to and args.baseline_source is not None:
                print(f"  the same readers of {args.baseline_source} (the baseline), and "
                      "how many times faster this version is:")
                (folder / "baseline").mkdir(exist_ok=True)
                for name, command in readers(run, folder / "baseline").items():
                    seconds, mib, _ = timed(command, source=args.baseline_source)
                    figures[f"{name} (baseline)"] = {"s": seconds, "mib": mib}
                    print(f"  {name:<14} {seconds:8.1f} s  {mib:8.0f} MiB peak  "
                          f"x{seconds / figures[name]['s']:.1f}", flush=True)
            if size <= args.baseline_up_to and args.baseline_source is None:
                old = as_one_document(run, folder / "one-document")
                print(f"  one-document layout (earlier versions), "
                      f"record.json {(old / 'record.json').stat().st_size / size / 1e3:.0f} "
                      "KB per seed-run:")
                for name in ("report json", "export"):
                    command = readers(old, folder / "old")[name]
                    (folder / "old").mkdir(exist_ok=True)
                    seconds, mib, _ = timed(command)
                    figures[f"{name} (one document)"] = {"s": seconds, "mib": mib}
                    ratio = mib / figures[name]["mib"]
                    print(f"  {name:<12} {seconds:8.1f} s  {mib:8.0f} MiB peak  "
                          f"({ratio:.1f}x the chunked record's memory)")
            print(f"  edited chunk: {edited_chunk_caught(run)}")
            results[size] = figures
        if args.assemble:
            largest = max(sizes)
            if args.assemble % largest:
                raise SystemExit(f"--assemble {args.assemble}: a multiple of {largest}")
            folder = base / f"seeds-{args.assemble}"
            run = folder / "run"
            if not (run / "fingerprint.txt").is_file():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                started = time.perf_counter()
                subprocess.run([sys.executable, str(Path(__file__).with_name(
                    "assemble_records.py")), str(base / f"seeds-{largest}" / "run"), str(run),
                    "--copies", str(args.assemble // largest)], check=True,
                    stdout=subprocess.DEVNULL)
                print(f"\n{args.assemble} seed-runs assembled from the {largest} trained "
                      f"(bench/assemble_records.py) in {time.perf_counter() - started:.0f} s")
            else:
                print(f"\n{args.assemble} seed-runs: the assembled run kept in {run}")
                for stale in ("tables", "run-twin"):
                    path = folder / stale
                    if path.is_symlink():
                        path.unlink()
                    elif path.is_dir():
                        shutil.rmtree(path)
            figures = {}
            commands = readers(run, folder, assembled=True)

            measure(commands, args.lanes, figures, folder)
            results[args.assemble] = figures
            print(f"  growth per 1,000 seed-runs from {largest} to {args.assemble}:")
            for name, found in figures.items():
                before = results[largest].get(name)
                if before is None:
                    continue
                per = 1000 / (args.assemble - largest)
                print(f"  {name:<14} {(found['s'] - before['s']) * per:8.1f} s  "
                      f"{(found['mib'] - before['mib']) * per:8.1f} MiB")
        if len(sizes) >= 2:
            print(f"\nextrapolated to {TARGET:,} seed-runs (least-squares line through "
                  f"{', '.join(map(str, sizes))}; worst residual of the fit in brackets):")
            for name in ("train", *readers(base, base)):
                if any(name not in results[size] for size in sizes):
                    continue
                for unit, label in (("s", "s"), ("mib", "MiB peak")):
                    values = [results[size][name][unit] for size in sizes]
                    intercept, slope, worst = fit(sizes, values)
                    print(f"  {name:<12} {intercept + slope * TARGET:10.0f} {label:<9} "
                          f"({slope * 1000:.2f} per 1,000 seed-runs; fit within "
                          f"{worst:.0%})")
            per_seed = [results[size]["bytes"]["record_per_seed"] for size in sizes]
            print(f"  record on disk: {max(per_seed) * TARGET / 1e9:.2f} GB "
                  f"({max(per_seed) / 1e3:.0f} KB per seed-run at most)")
        if args.json:
            # a figure not measured (training of a kept run) is null, not NaN (not JSON)
            clean = {size: {name: {k: None if v != v else v for k, v in values.items()}
                            for name, values in figures.items()}
                     for size, figures in results.items()}
            args.json.write_text(json.dumps({"sizes": sizes, "results": clean}, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
