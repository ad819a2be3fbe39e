"""Intra-op threads for the analyzers' operations (issue 29, rows31).

The analyzers' operations are small (a batch's pattern of one layer: a few hundred thousand
floats), so splitting each across OpenMP threads gains little, and on a loaded machine a
thread whose partner is descheduled spins until it returns (rows30 measured 17x the CPU time
of one thread). ``limited_threads`` runs a block at fewer intra-op threads and restores the
count after; the feeder wraps its calls into the analyzers with it, so the forward's large
products keep every thread. ``ATTNLENS_ANALYZER_THREADS=N`` sets the analyzers' count
(``0``: as many as the forward; unset: ``DEFAULT_ANALYZER_THREADS``). The count changes
no result beyond the order in which a parallel reduction adds its parts (float rounding;
every analyzer of ``analyze`` gave the same states at one and two threads).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from attnlens.errors import ConfigError

ENV = "ATTNLENS_ANALYZER_THREADS"
# the analyzers' threads when the variable is unset (None: as many as the forward). Measured
# on the shared 2-core machine under load: one thread 1.25x faster for the pass (wall), the
# same states; on an idle machine not yet measured, so the default keeps the forward's.
DEFAULT_ANALYZER_THREADS: int | None = None


def analyzer_threads_setting() -> int | None:
    """The analyzers' intra-op threads from ``ATTNLENS_ANALYZER_THREADS`` (None: unlimited;
    unset or blank: ``DEFAULT_ANALYZER_THREADS``)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_ANALYZER_THREADS
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{ENV} must be a whole number of threads (0: no limit), "
                          f"not {text!r}.") from None
    if value < 0:
        raise ConfigError(f"{ENV} must be at least 0 (0: no limit), not {value}.")
    return value or None


@contextmanager
def limited_threads(threads: int | None) -> Iterator[None]:
    """Run the block with at most ``threads`` intra-op threads (None: unchanged); nests."""
    before = torch.get_num_threads()
    if threads is None or threads >= before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_POOL: list = []  # one ThreadPoolExecutor, made on first use


def run_split(work: Callable[[int, int], None], count: int, threads: int | None = None
              ) -> None:
    """``work(first, stop)`` over ``0 .. count`` split in contiguous parts between ``threads``
    threads (default: the intra-op threads, ``torch.get_num_threads()``), for a C kernel that
    releases the GIL and writes each item's results only. One part runs in this thread;
    ``count`` below the number of threads runs here whole."""
    parts = max(1, min(threads or torch.get_num_threads(), count))
    if parts == 1:
        work(0, count)
        return
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                        thread_name_prefix="attnlens-kernel"))
    bounds = [count * k // parts for k in range(parts + 1)]
    pending = [_POOL[0].submit(work, bounds[k], bounds[k + 1]) for k in range(1, parts)]
    work(bounds[0], bounds[1])
    for job in pending:
        job.result()
