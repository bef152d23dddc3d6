"""Executors: where a run's tasks execute, behind one seam.

Orchestration hands self-contained, picklable tasks to an executor and waits on the futures it
returns, so the record cannot depend on where tasks ran. An executor is a
``concurrent.futures.Executor`` with two additions:

- ``sink``: the event sink to pass into each task (``executor.submit(task, executor.sink)``).
  It must work wherever the executor runs the task, so each kind supplies its own.
- ``capacity``: how many tasks to keep submitted at once; orchestration submits no more, so a
  sequential executor runs seed by seed and a pool always has work.

Leaving the executor's ``with`` block on an exception stops it at once (``abort``): a pool's
workers are killed, not waited for, and completed seeds are already on disk.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from postlab.registry import Registry
from postlab.runs.workers import worker_context

Emit = Callable[[dict[str, Any]], None]

#: The event a pool's worker sends first, naming its pid, so the parent can kill it later.
WORKER_STARTED = "worker_started"


def configure_torch(threads: int, device: str = "cpu") -> None:
    """The plan's thread count and deterministic kernels (CUDA's too, on CUDA), in whichever
    process runs a task."""
    from postlab.machine.device import configure

    torch.set_num_threads(threads)
    deterministic_algorithms()
    configure(device)


def deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without its import of ``torch._inductor``:
    that import only sets the compiler's own flag (postlab never compiles) and cost 0.73 s of
    every process's start here (torch 2.13, 2-core Xeon), about 9 % of a teaching run on two
    workers. Where torch lacks the kernel-level switch, the public call is made."""
    switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if switch is None:
        torch.use_deterministic_algorithms(True)
    else:
        switch(True, warn_only=False)


class TaskExecutor(cf.Executor):
    """The seam: a standard executor plus the sink tasks report to and how many to submit."""

    sink: Emit
    capacity: int

    def abort(self) -> None:
        """Stop running tasks now; their results are not wanted. Nothing to do by default."""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc_type is not None:
            self.abort()
        self.shutdown(wait=True, cancel_futures=True)
        return False


EXECUTORS: Registry[Callable[..., TaskExecutor]] = Registry("executor")


def make_executor(kind: str, *, workers: int, threads: int, sink: Emit,
                  **settings: Any) -> TaskExecutor:
    """An executor of ``kind`` running ``workers`` tasks at a time on ``threads`` threads each,
    whose tasks' events reach ``sink`` in this process; ``settings`` are the kind's own
    (a Ray cluster's ``address``)."""
    return EXECUTORS[kind](workers, threads, sink, **settings)


def default_kind(workers: int) -> str:
    return "local" if workers <= 1 else "processes"


@EXECUTORS.register("local")
class LocalExecutor(TaskExecutor):
    """Runs each task in this process when it is submitted; the sink is the display's own."""

    def __init__(self, workers: int, threads: int, sink: Emit) -> None:
        del workers  # one task at a time, whatever was asked
        configure_torch(threads)
        self.sink = sink
        self.capacity = 1
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        if self._closed:
            raise RuntimeError("cannot submit to an executor that was shut down")
        future: cf.Future = cf.Future()
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # a task's failure belongs to its future, as in a pool
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future  # Ctrl-C (not an Exception) propagates at once, as it should

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True


# --- a pool of worker processes ------------------------------------------------------------

#: In a pool's worker process only: the queue its tasks' events go to. A queue can reach pool
#: workers only by inheritance (the pool's initializer), never as a task's argument.
_worker_events: Any = None


def _start_worker(events: Any, threads: int, main_pid: int) -> None:
    global _worker_events
    _die_with_parent()
    _die_with_main(main_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    configure_torch(threads)
    _worker_events = events
    events.put({"kind": WORKER_STARTED, "pid": os.getpid()})


def worker_sink(event: dict[str, Any]) -> None:
    """The sink a pool's tasks get: the queue the parent pumps into its display."""
    _worker_events.put(event)


def _die_with_parent() -> None:
    """Ask Linux to kill this worker if its parent (the fork server) dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _die_with_main(pid: int) -> None:
    """End this worker as soon as the main process ends, so no orphan keeps writing.

    The fork server outlives the main process while any worker lives (workers hold its
    "alive" pipe), and an idle worker's task queue never reaches end-of-file (it holds both
    ends), so neither the OS nor the pool would end it: a thread here watches the main process.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
        return
    except (AttributeError, OSError):  # no pidfds: look once a second
        def wait() -> None:
            while os.getppid() != 1 and _alive(pid):
                time.sleep(1)
    else:
        def wait() -> None:
            select.select([fd], [], [])  # readable once the process has ended

    def watch() -> None:
        wait()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="postlab-watch-main", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Worker:
    """A worker process named by its pid, held by a pidfd where the OS has them, so that a
    kill cannot reach another process that reused the pid after the worker ended."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfds, or the worker ended
            self.fd = os.pidfd_open(pid)

    def kill(self) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@EXECUTORS.register("processes")
class ProcessExecutor(TaskExecutor):
    """A pool of single-task worker processes forked from the fork server.

    Workers die with the main process, ignore Ctrl-C, and are configured with the plan's threads
    and deterministic kernels. Each reports its pid on the event queue before taking a task, so
    ``abort`` can kill every worker that may be running one, without the pool's internals.
    """

    def __init__(self, workers: int, threads: int, sink: Emit) -> None:
        context = worker_context()
        self.sink = worker_sink
        self.capacity = workers
        self._display = sink
        self._events = context.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._aborting = False
        self._pump = threading.Thread(target=self._pump_events, daemon=True)
        self._pump.start()
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                            initializer=_start_worker,
                                            initargs=(self._events, threads, os.getpid()))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        return self._pool.submit(fn, *args, **kwargs)

    def _pump_events(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            if event.get("kind") == WORKER_STARTED:
                self._adopt(_Worker(event["pid"]))
            else:
                self._display(event)

    def _adopt(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.append(worker)
            if self._aborting:  # started as the pool was being stopped
                worker.kill()

    def abort(self) -> None:
        with self._lock:
            self._aborting = True
            for worker in self._workers:
                worker.kill()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if not wait:
            return
        self._events.put(None)  # after the workers' last events, which the pump shows first
        self._pump.join(timeout=5)
        with self._lock:
            for worker in self._workers:
                worker.close()


# --- a Ray cluster ---------------------------------------------------------------------------

#: How often Ray runs a task again after its worker process died (not after an exception the
#: task raised: those are results, and the same inputs would raise again).
RAY_RETRIES = 3


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        from postlab.errors import UserError

        raise UserError("--executor ray needs the ray extra: pip install 'postlab[ray]'") from None
    return ray


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A HOST:PORT that nothing answers on is refused at once, in one line, instead of
    waiting out Ray's own connection retries."""
    if address is None or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:6379
    from postlab.errors import UserError

    if not host or not port.isdigit():
        raise UserError(f"--address {address}: expected HOST:PORT, 'auto', or a ray:// URL")
    import socket

    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UserError(f"--address {address}: no Ray cluster answers there "
                        f"({exc.strerror or exc})") from None


def _ray_task(task: Callable[[Emit], Any], threads: int, device: str) -> Any:
    """Runs in a Ray worker: the plan's threads and deterministic kernels, then the task.
    Progress events stay in the worker; the driver reports tasks as they finish."""
    configure_torch(threads, device)
    return task(lambda event: None)


@EXECUTORS.register("ray")
class RayExecutor(TaskExecutor):
    """Tasks as Ray tasks, on the cluster at ``address`` or on a local Ray started for the run.

    Each task declares ``threads`` CPUs (and one GPU on CUDA), so Ray places no more tasks on
    a node than it has cores; ``workers`` caps how many are submitted at once (0: as many as
    the cluster has CPUs). Worker processes get the driver's CPU code-path pin through the
    runtime environment, before they import torch; a task reports the kernels it ran and the
    driver refuses a result that differs. Run folders must be on a filesystem every node sees.
    """

    def __init__(self, workers: int, threads: int, sink: Emit, address: str | None = None,
                 device: str = "cpu") -> None:
        from postlab.machine import numerics

        ray = _require_ray()
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            _check_reachable(address)
            pinned = numerics.current_pin()
            env = dict(numerics.CODE_PATHS[pinned].environment) if pinned else {}
            env["OMP_NUM_THREADS"] = str(threads)
            if device == "cuda":  # set before CUDA initialises, as in a run on one machine
                from postlab.machine.device import CUBLAS_WORKSPACE

                env["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
            try:
                # "local": a Ray of its own, never a cluster found through the environment
                ray.init(address=address or "local", runtime_env={"env_vars": env},
                         log_to_driver=False,
                         include_dashboard=False, configure_logging=False)
            except (ConnectionError, ValueError) as exc:
                from postlab.errors import UserError

                raise UserError(f"--address {address}: cannot join a Ray cluster: "
                                f"{str(exc).splitlines()[0]}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = workers if workers > 0 else max(1, cpus // threads)
        self.sink = sink
        self._threads, self._device = threads, device
        self._remote = ray.remote(_ray_task).options(
            num_cpus=threads, num_gpus=1 if device == "cuda" else 0, max_retries=RAY_RETRIES,
            retry_exceptions=False)
        self._refs: list[Any] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        del args, kwargs  # the sink: a Ray task reports through its result only
        ref = self._remote.remote(fn, self._threads, self._device)
        self._refs.append(ref)
        return ref.future()

    def abort(self) -> None:
        for ref in self._refs:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
