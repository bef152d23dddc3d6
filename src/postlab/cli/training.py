"""``postlab run``, ``reproduce`` and ``sweep``: the training commands, over :mod:`postlab.api`.

Each parses nothing itself and decides nothing the API does not: it passes the arguments,
prints the API's lines (unless ``--quiet``) and its progress, and turns a stopped run into a
message that says what was kept and how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from postlab import api
from postlab.runs.progress import PLAIN_EVERY, Live, Quiet, make_display


class Stopped(Exception):
    """Training stopped early; the message was printed and completed seeds were kept."""

    def __init__(self, code: int) -> None:
        self.code = code


def _print(line: str) -> None:
    print(line, flush=True)


def _quiet(line: str) -> None:
    """--quiet: the line is not shown."""


def _say(args: argparse.Namespace):
    return _quiet if args.quiet else _print


@contextlib.contextmanager
def _training(out_dir: Path, quiet: bool, what: str = "completed seeds are"
              ) -> Iterator[tuple[Quiet, int]]:
    """A progress display for the command, and the message when training stops."""
    from postlab.errors import NonFiniteError, RunFailed

    display = make_display(quiet)
    every = 0 if quiet else (1 if isinstance(display, Live) else PLAIN_EVERY)
    try:
        yield display, every
    except (NonFiniteError, RunFailed) as exc:
        display.close()
        print(f"postlab: training stopped: {exc}; {what} kept in {out_dir} (continue with "
              "--resume)", file=sys.stderr)
        raise Stopped(1) from None
    except KeyboardInterrupt:
        display.close()
        print(f"postlab: interrupted; {what} kept in {out_dir} (continue with --resume)",
              file=sys.stderr)
        raise Stopped(130) from None
    finally:
        display.close()


def run(args: argparse.Namespace) -> int:
    with _training(args.out_dir, args.quiet) as (display, every):
        result = api.run(args.out_dir, args.plan, resume=args.resume, workers=args.workers,
                         cpu_path=args.cpu_path, device=args.device, engine=args.engine,
                         log=tuple(args.log or ()), allow_large=args.allow_large,
                         recalibrate=args.recalibrate, say=_say(args),
                         say_cost=_say(args), display=display, progress_every=every,
                         registration=args.registration)
    if not args.quiet:
        print(f"done: {args.out_dir} in {result.seconds:.1f} s")
        print(f"results fingerprint: {result.results_fingerprint} (note it: the same for every "
              f"run of this plan on this code path; 'postlab verify {args.out_dir} --expect "
              "FINGERPRINT' checks the plan, rows, summary and checkpoints against it)")
        print(f"run fingerprint: {result.fingerprint} (every file of this run, its wall time "
              "and machine included)")
    return 0


def reproduce(args: argparse.Namespace) -> int:
    from postlab.records.compare import render_comparison

    with _training(args.out_dir, args.quiet) as (display, every):
        result = api.reproduce(args.run, args.out_dir, workers=args.workers,
                               cpu_path=args.cpu_path, device=args.device,
                               seeds=args.seeds, allow_large=args.allow_large,
                               recalibrate=args.recalibrate, say=_print,
                               say_cost=_say(args), display=display, progress_every=every)
    if result.results is not None:
        recorded, new = result.results
        print(f"results fingerprint: recorded {recorded}, new {new}: "
              + ("the same" if recorded == new else "different"))
    sys.stdout.write(render_comparison(result.comparison))
    if not result.identical:
        sys.stdout.write(result.environment_hint)
    return 0 if result.identical else 1


def sweep(args: argparse.Namespace) -> int:
    from postlab.errors import NonFiniteError, RunFailed
    from postlab.sweeps.progress import SweepProgress

    start = time.monotonic()
    try:
        results = api.sweep(args.sweep_file, args.out_dir, resume=args.resume,
                            workers=args.workers, executor=args.executor,
                            address=args.address, cpu_path=args.cpu_path, device=args.device,
                            engine=args.engine, log=tuple(args.log or ()),
                            allow_large=args.allow_large, recalibrate=args.recalibrate,
                            say=_say(args),
                            progress=SweepProgress(0, quiet=args.quiet))
    except (NonFiniteError, RunFailed) as exc:
        print(f"postlab: the sweep stopped: {exc}; finished tasks are kept in {args.out_dir} "
              "(continue with --resume)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"postlab: interrupted; finished tasks are kept in {args.out_dir} (continue "
              "with --resume)", file=sys.stderr)
        return 130
    failed = [name for name, record in results.items() if record is None]
    if failed:
        print(f"postlab: {len(failed)} version(s) had failed tasks ({', '.join(failed)}); "
              f"completed seeds are kept in {args.out_dir} (continue with --resume)",
              file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"done: {args.out_dir} ({len(results)} versions) in "
              f"{time.monotonic() - start:.1f} s; compare them with 'postlab compare "
              f"{args.out_dir}'")
    return 0
