"""A Ray head on the loopback address for tests, stopped without touching any other Ray on
the machine (``ray stop`` would end every Ray of this user, a concurrent test run's too)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ray_command() -> str:
    found = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert found is not None, "the ray package is installed but its command is not"
    return found


def start_head(cpus: int = 2) -> tuple[str, Path]:
    """(address, the head's own temp folder); the folder names its processes."""
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="plray"))
    started = subprocess.run(
        [ray_command(), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
         f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}"], capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    return f"127.0.0.1:{port}", temp


def _pids_of(temp: Path) -> list[int]:
    """This head's processes (their command lines name its temp folder), and their children
    (Ray's workers and agents, whose titles do not)."""
    marker = str(temp).encode()
    found = []
    ours = {os.getpid(), os.getppid()}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in ours:
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    children = []
    for pid in found:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                children += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found + children


def stop_head(temp: Path) -> None:
    pids = _pids_of(temp)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(1.0)
    shutil.rmtree(temp, ignore_errors=True)
