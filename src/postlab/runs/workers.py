"""Worker processes: how many, and the server they are forked from.

Workers fork from a fresh server process that has imported postlab's engine (and so torch)
but run nothing. A plain fork of the main process could inherit a started OpenMP thread pool
and hang; a spawned worker would import torch again for every process. The server is started
as early as possible so that its imports overlap the main process's own.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.context import BaseContext

from postlab.errors import UserError
from postlab.machine.resources import usable_cores

#: The engine, and with it torch. Not torch's compiler stack: training never imports it
#: (:mod:`postlab.engines.optim`), which saves every run's first task its import.
PRELOAD = ["postlab.runs.orchestration"]
#: Sets the worker count when ``--workers`` is not given: on a machine whose cores other jobs
#: already keep busy (a test suite running one test per core, say), more workers add only
#: their server's start (about 4 CPU-seconds per run, measured on a 2-core machine).
WORKERS_VARIABLE = "POSTLAB_WORKERS"


def default_workers() -> int:
    """``POSTLAB_WORKERS`` when set, else one worker per core this process may use."""
    chosen = os.environ.get(WORKERS_VARIABLE, "").strip()
    if chosen:
        # at most a few digits: int() of thousands of them is an error of its own
        if not (chosen.isascii() and chosen.isdigit() and len(chosen) <= 6) or int(chosen) < 1:
            raise UserError(f"{WORKERS_VARIABLE}={chosen[:40]!r}: expected a whole number of "
                            "worker processes, at least 1")
        return int(chosen)
    return usable_cores()


def worker_context() -> BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def start_worker_server() -> None:
    """Start the fork server now (it is reused by every pool of this process)."""
    from multiprocessing import forkserver

    worker_context()
    forkserver.ensure_running()
