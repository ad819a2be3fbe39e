"""Analyzers' own forward passes run in forked processes beside the corpus pass.

An analyzer that reads nothing of the corpus pass and only runs forward passes of its own
(``Analyzer.runs_beside``: the collapse variants, whose residuals are the same bits at one
thread as at any other, for any batching) does not need the pass: a forked child
(``report.side_work``, one thread) feeds a copy of it every batch (``own_passes_state``)
and hands back its state, which the parent loads into its own, unfed analyzer just before
the section that holds it writes (``OwnPassesBeside.take``). The pass itself runs without
it. The tables are the same bits as with the analyzer in the pass
(``tests/test_own_passes_beside.py``); where side workers are not allowed
(``side_workers_allowed``), or a checkpoint saves or restores the analyzers' states, every
analyzer stays in the pass.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from attnlens.report.side_work import SideJob, side_job
from attnlens.runs import stopwatch
from attnlens.stream.base import Analyzer, Batch


def own_passes_state(analyzer: Analyzer, model, batches: Sequence[Batch]) -> dict:
    """Feed ``analyzer`` every batch's own forward passes (``model_pass``); its state."""
    with stopwatch.phase(f"{analyzer.name}: its own forward passes"):
        for batch in batches:
            analyzer.model_pass(model, batch.to(model.device))
        return analyzer.state_dict()


class OwnPassesBeside:
    """The analyzers of ``analyzers`` that run beside the pass (``runs_beside``), each in a
    forked child started now; none when ``forked`` is False."""

    def __init__(self, analyzers: Sequence[Analyzer], model, batches: Sequence[Batch],
                 forked: bool) -> None:
        self.jobs: list[tuple[Analyzer, SideJob]] = [
            (a, side_job(f"{a.name}' own forward passes",
                         functools.partial(own_passes_state, a, model, batches), forked=True))
            for a in (analyzers if forked else ()) if a.runs_beside]

    def holds(self, analyzer: Analyzer) -> bool:
        return any(a is analyzer for a, _ in self.jobs)

    def in_pass(self, analyzers: Sequence[Analyzer]) -> list[Analyzer]:
        """``analyzers`` less those run beside the pass."""
        return [a for a in analyzers if not self.holds(a)]

    def take(self, analyzers: Sequence[Analyzer]) -> None:
        """Load the states of those of ``analyzers`` run beside (waiting for their children)."""
        for analyzer, job in self.jobs:
            if any(a is analyzer for a in analyzers):
                analyzer.load_state_dict(job.result())

    def cancel(self) -> None:
        """End the children still running (a failed report does not wait for them)."""
        for _, job in self.jobs:
            job.cancel()
