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
         # Ray's client server defaults to port 10001, which a concurrent head would share
         f"--ray-client-server-port={free_port()}",
         f"--temp-dir={temp}"], capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    return f"127.0.0.1:{port}", temp


def _pids_of(temp: Path, address: str) -> list[int]:
    """This head's processes (their command lines name its temp folder, or, for the Ray
    client server, which 'ray start' leaves outside the head's process tree, its GCS port),
    and their children (Ray's workers and agents, whose titles do not)."""
    marker = str(temp).encode()
    gcs_port = f":{address.rsplit(':', 1)[1]} ".encode()
    found = []
    ours = {os.getpid(), os.getppid()}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in ours:
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            client = b"ray.util.client.server" in line and gcs_port in line
            if marker in line or client:
                found.append(int(entry.name))
    children = []
    for pid in found:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                children += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found + children


def stop_head(temp: Path, address: str) -> None:
    pids = _pids_of(temp, address)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(1.0)
    shutil.rmtree(temp, ignore_errors=True)
