"""Render report figures in parallel worker processes.

Drawing a matplotlib figure (layout of every text artist, rasterising, PNG compression) is
work that does not need the model. Figures written as SVG by attnlens' own writer
(``attnlens.plots.svg``, the default format) take milliseconds and never reach the pool;
the pool (and matplotlib's warm-up) starts only when the first matplotlib figure arrives
(``--format png`` or ``pdf``, or a figure without an SVG twin). Inside ``with figure_pool():``
the report's ``save_figure`` hands each such figure to the forked workers and returns at once
with the paths the files will have; leaving the block waits for every figure and re-raises
the first failure. A figure given as a *recipe* (a picklable zero-argument callable such as
``functools.partial(layer_head_heatmap, table, title)``) is also built in the worker, so the
main process only ships the small table; a ready ``Figure`` is pickled and only drawn there.

Workers are forked (Linux only, where fork is cheap and matplotlib is already imported); on
other systems, with one CPU or with ``ATTNLENS_FIGURE_WORKERS=0`` figures are drawn in the
calling process, exactly as without the pool. The workers never call torch, so forking a
process whose torch thread pool is running is safe.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnlens.runs import io
from attnlens.runs.held_signals import signals_held


class _Pool:
    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("fork")
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        self.futures: list[Future] = []

    def submit(self, figure: Any, write: Callable[[Any, Path, str], None], jobs: list) -> None:
        """Queue one figure (``attnlens.runs.io.FIGURE_QUEUES`` calls this from save_figure)."""
        self.futures.append(self.executor.submit(io.draw_figure, figure, write, jobs))

    def finish(self) -> None:
        try:
            for future in self.futures:
                future.result()  # re-raises a worker's exception here
        finally:
            self.executor.shutdown(wait=True, cancel_futures=True)


def default_workers() -> int:
    """``ATTNLENS_FIGURE_WORKERS`` if set, else the usable CPUs (at most 4); 0 off Linux."""
    configured = os.environ.get("ATTNLENS_FIGURE_WORKERS")
    if configured is not None:
        return max(0, int(configured))
    if not sys.platform.startswith("linux"):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(4, cpus or 1) if (cpus or 1) > 1 else 0


@contextmanager
def figure_pool(workers: int | None = None) -> Iterator[None]:
    """Draw figures saved inside this block in ``workers`` processes (see the module doc)."""
    workers = default_workers() if workers is None else workers
    if workers <= 0:
        yield
        return
    pool = _LazyPool(workers)
    io.FIGURE_QUEUES.append(pool.submit)
    try:
        yield
    except BaseException:
        io.FIGURE_QUEUES.remove(pool.submit)
        pool.cancel()
        raise
    io.FIGURE_QUEUES.remove(pool.submit)
    pool.finish()


class _LazyPool:
    """A ``_Pool`` forked on the first figure submitted (none for an all-SVG report)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: _Pool | None = None

    def submit(self, figure: Any, write: Callable[[Any, Path, str], None], jobs: list) -> None:
        with signals_held():  # the first submit forks the workers: a Ctrl-C then is not lost
            if self.pool is None:
                _warm_up()  # forked workers inherit loaded fonts and text-layout caches
                self.pool = _Pool(self.workers)
            self.pool.submit(figure, write, jobs)

    def finish(self) -> None:
        if self.pool is not None:
            self.pool.finish()

    def cancel(self) -> None:
        if self.pool is not None:
            self.pool.executor.shutdown(wait=True, cancel_futures=True)


def _warm_up() -> None:
    """Draw one small figure with text so matplotlib loads its fonts before the fork."""
    from io import BytesIO

    from attnlens.plots.style import STYLE, pyplot

    plt = pyplot()  # the Agg backend, set before pyplot loads

    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(1, 1))
        fig.text(0.5, 0.5, "0.123456789 layer head", fontsize=6)
        fig.suptitle("warm")
        fig.savefig(BytesIO(), format="png")
        plt.close(fig)
