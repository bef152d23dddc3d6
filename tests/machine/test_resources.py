"""The process's cores, resident memory and age, as the estimate and the worker count read
them."""

import subprocess
import sys
import time

from postlab.machine.resources import (
    peak_growth,
    peak_resident_bytes,
    process_seconds,
    resident_bytes,
    usable_cores,
)


def test_resident_memory_follows_what_the_process_holds():
    before = resident_bytes()
    held = bytearray(64 * 2**20)
    held[::4096] = b"x" * len(held[::4096])  # touch every page, so it is resident
    after = resident_bytes()
    assert after - before > 48 * 2**20
    assert peak_resident_bytes() >= after - 4 * 2**20  # the peak is at least what is held now
    del held


def test_cores_are_at_least_one():
    assert usable_cores() >= 1


def test_a_process_knows_how_long_it_has_run():
    # a child that sleeps before asking reports at least that long; this process, older
    # than its own sleep, too
    code = ("import time; time.sleep(0.5); from postlab.machine.resources import "
            "process_seconds; print(process_seconds())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout)
    assert 0.45 <= age < 60
    before = process_seconds()
    time.sleep(0.2)
    assert process_seconds() - before >= 0.15


def test_the_peak_of_a_call_counts_what_it_freed_before_returning():
    def briefly() -> int:
        held = bytearray(64 * 2**20)
        held[::4096] = b"x" * len(held[::4096])
        return len(held)

    result, grown = peak_growth(briefly)
    assert result == 64 * 2**20
    if grown is not None:  # where the system lets a process reset its high-water mark
        assert 48 * 2**20 < grown < 128 * 2**20
        # and a second time, though the allocator could keep the first call's pages
        assert peak_growth(briefly)[1] > 48 * 2**20
    nothing = peak_growth(lambda: None)[1]
    assert nothing is None or 0 <= nothing < 8 * 2**20


def test_the_level_2_cache_is_read_from_sysfs_or_defaulted(tmp_path):
    from postlab.machine.resources import DEFAULT_L2_BYTES, l2_cache_bytes

    for index, (level, size) in enumerate([("1", "48K"), ("1", "32K"), ("2", "2048K"),
                                           ("3", "300M")]):
        folder = tmp_path / "cache" / f"index{index}"
        folder.mkdir(parents=True)
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    assert l2_cache_bytes(str(tmp_path / "cache")) == 2048 * 1024
    (tmp_path / "cache" / "index2" / "size").write_text("1M\n")
    assert l2_cache_bytes(str(tmp_path / "cache")) == 1 << 20
    assert l2_cache_bytes(str(tmp_path / "none")) == DEFAULT_L2_BYTES
    (tmp_path / "cache" / "index2" / "size").write_text("big\n")
    assert l2_cache_bytes(str(tmp_path / "cache")) == DEFAULT_L2_BYTES
