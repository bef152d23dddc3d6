"""``postlab COMMAND``: parse, call the command, and turn every outcome into an exit code.

Every user mistake surfaces as a :class:`~postlab.errors.UserError`, printed as one line with
exit code 2; any other exception is a bug in postlab, shown with its traceback and exit code 1.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import NoReturn

from postlab.cli import checks, plans, reports, training
from postlab.cli.parser import UsageError, build_parser
from postlab.errors import UserError

COMMANDS = {"freeze": plans.freeze, "plan": plans.plan, "report": reports.report,
            "eval": reports.evaluate,
            "run": training.run, "verify": checks.verify, "reproduce": training.reproduce,
            "plot": reports.plot, "samples": reports.samples, "sweep": training.sweep,
            "design": checks.design,
            "compare": reports.compare, "exercises": checks.exercises,
            "export": reports.export, "register": plans.register}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except training.Stopped as stop:
        return stop.code
    except UsageError as exc:
        print(exc, file=sys.stderr)  # already begins with the command's name
        return 2
    except UserError as exc:
        print(f"postlab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("postlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``postlab samples | head``): stop quietly, as shell tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception:
        # Not the user's input: a bug. Show everything needed to fix it, and say so.
        traceback.print_exc()
        print("postlab: this is a bug in postlab, not a problem with your input; please "
              "report it with the traceback above", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with ``code`` once Python's own exit work is done: its threads
    joined, its exit handlers run (worker pools and the fork server stopped, logs and
    temporary folders closed), standard streams flushed; then leave without the
    interpreter's teardown and the native libraries' static destructors.

    Those destructors are where a process that had printed its right answer died with
    SIGABRT ("terminate called without an active exception": a native thread pool's
    thread still joinable when its owner is destroyed), seen about one time in three after
    a refused chunk and now and then after a correct ``reproduce``. No library we use (torch,
    Arrow, DuckDB) offers a call that stops its pools, and every file postlab writes is
    published before its command returns, so nothing is lost by skipping them."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        # a profiler or coverage tool writes its report at a normal exit
        sys.exit(code)
    # what a normal exit runs, in its order; neither step has a public name
    threading._shutdown()  # type: ignore[attr-defined]  # joins threads, wakes idle pools
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe or stream: nothing more can be said on it
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
