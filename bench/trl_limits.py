"""The machine's limits an RL step is measured against, and the work a step does.

Used by ``bench_trl.py``:

* **matmul limit**: the best float32 matrix-product rate this process reaches on square
  products (1,024 to 3,072, and 8,192 on a GPU; best of several calls each) on the bench's
  device, on its thread count on the CPU;
* **read bandwidth**: the best rate at which it sums a 1 GiB tensor there (every byte read
  once), the limit of a decoding step that reads every weight once per token;
* **FLOPs of a step**: counted, not estimated, by ``torch.utils.flop_counter`` while one
  RL step runs (generation, the policy's forward and backward passes, the reference's
  forward pass; the optimizer's element-wise work is not matrix arithmetic and is not
  counted). The count is each side's own: work a trainer does twice is counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def _best(run: Callable[[], Any], repeats: int, device: str) -> float:
    """The shortest of ``repeats`` timed calls (a GPU's queue drained before and after)."""
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_limit(device: str = "cpu", sizes: tuple[int, ...] = (1024, 2048, 3072),
                 repeats: int = 4) -> float:
    """FLOP/s: the best float32 square matrix product rate on ``device`` (on the CPU, with
    this process's threads; on a GPU, as torch's float32 settings have it)."""
    rates = []
    generator = torch.Generator().manual_seed(0)
    sizes = sizes if device == "cpu" else (*sizes, 8192)  # a GPU needs larger products
    for n in sizes:
        a = torch.randn(n, n, generator=generator).to(device)
        b = torch.randn(n, n, generator=generator).to(device)
        torch.mm(a, b)  # warm
        rates.append(2 * n**3 / _best(lambda a=a, b=b: torch.mm(a, b), repeats, device))
    return max(rates)


def read_bandwidth(device: str = "cpu", gib: float = 1.0, repeats: int = 4) -> float:
    """Bytes/s: the best rate at which a sum reads a float32 tensor of ``gib`` GiB on
    ``device``."""
    x = torch.ones(int(gib * 2**30) // 4, device=device)
    x.sum()
    return x.numel() * 4 / _best(x.sum, repeats, device)


def counted_flops(run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the FLOPs of the matrix products it ran."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        result = run()
    return result, int(counter.get_total_flops())


def print_limits(limits: dict[str, float], flops: dict[str, int], medians: dict[str, float],
                 decoding: dict[str, dict[str, float]], weight_bytes: int,
                 batch: int) -> None:
    """Each side's share of the matmul limit, and decoding against the read bandwidth."""
    limit, bandwidth = limits["matmul"], limits["bandwidth"]
    print(f"against this machine's limits (measured now: float32 matmul {limit / 1e9:.1f} "
          f"GFLOP/s, memory read {bandwidth / 1e9:.1f} GB/s):")
    base = flops["postlab"]
    for side, count in flops.items():
        seconds = medians[side]
        print(f"  {side:10s} {count / 1e9:9,.1f} GFLOP a step (counted), "
              f"{count / seconds / 1e9:6.1f} GFLOP/s = {count / seconds / limit * 100:5.1f} % of "
              f"the limit; the step's work as postlab counts it: "
              f"{base / seconds / limit * 100:5.1f} %")
    ceiling = batch * bandwidth / weight_bytes
    for side, found in decoding.items():
        rate = found["tokens"] / found["seconds"]
        print(f"  {side:10s} decoding {rate:7.1f} tokens/s; reading the weights "
              f"({weight_bytes / 2**20:.1f} MiB) once per step of {batch} sequences allows "
              f"{ceiling:.0f}: {rate / ceiling * 100:5.1f} %")
