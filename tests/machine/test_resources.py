"""The process's cores and resident memory, as the estimate and the worker count read them."""

from postlab.machine.resources import peak_resident_bytes, resident_bytes, usable_cores


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
