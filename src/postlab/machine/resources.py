"""What this process may use and what it holds: its cores, its resident memory, its age."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from collections.abc import Callable
from typing import Any


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the system says), at least 1."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: A core's level-2 cache where the system does not say (a common size today).
DEFAULT_L2_BYTES = 1 << 20


def l2_cache_bytes(folder: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """One core's level-2 cache in bytes (Linux: sysfs), else :data:`DEFAULT_L2_BYTES`."""
    try:
        for index in sorted(os.listdir(folder)):
            with open(f"{folder}/{index}/level") as level:
                if level.read().strip() != "2":
                    continue
            with open(f"{folder}/{index}/size") as size:
                text = size.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            return int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2_BYTES


def resident_bytes() -> int:
    """This process's resident memory now (Linux: ``/proc/self/statm``), else its peak so far,
    which is what other systems report."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_resident_bytes()


def peak_resident_bytes() -> int:
    """The most resident memory this process has held (``ru_maxrss``: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def process_seconds() -> float | None:
    """Wall seconds since this process started (Linux: ``/proc``), None where unknown: what
    a run has spent starting (the interpreter, torch, the plan's checks) before it calibrates."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            # the command name (field 2) may hold spaces: count fields after its ")"
            started = int(stat.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as uptime:
            now = float(uptime.read().split()[0])
        return max(0.0, now - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def peak_growth(call: Callable[[], Any]) -> tuple[Any, int | None]:
    """``call()``'s result and how far it raised this process's resident memory at its peak
    over what was resident before, in bytes (Linux: the high-water mark, reset first through
    ``/proc/self/clear_refs``, after the allocator has given back what it kept of memory
    freed earlier, which the call would otherwise reuse unseen); None where that cannot be
    read. Memory freed by the end of the call counts: a batch's activations are gone once
    it returns. Resetting the mark lowers this process's ``ru_maxrss`` too: peaks before the
    call are forgotten (a run calibrates before it trains, so its peak is still counted)."""
    _release_freed()
    before = resident_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets the high-water mark (VmHWM)
    except OSError:
        return call(), None
    result = call()
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return result, max(0, int(line.split()[1]) * 1024 - before)
    except (OSError, ValueError, IndexError):
        pass
    return result, None


def _release_freed() -> None:
    """Hand memory the C allocator keeps after frees back to the system (glibc), so resident
    memory is what is held."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to hand back
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
