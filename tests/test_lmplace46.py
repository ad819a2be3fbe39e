"""The language-model heads' long probes run by whichever process reaches them first
(issue 29, lmplace46): ``side_work.Claim`` across the probes' fork, ``LmHeads`` asking it."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlens.report import analyze as report
from attnlens.report import side_work
from attnlens.runs import stopwatch
from tests.lm_heads_toys import assert_same_measure

needs_fork = pytest.mark.skipif(not side_work.side_workers_allowed(torch.nn.Linear(1, 1)),
                                reason="side workers fork on Linux with 2+ CPUs")
EVENTS = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True)
def no_phases():
    stopwatch.PHASES.clear()
    yield
    stopwatch.PHASES.clear()


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# The claim --------------------------------------------------------------------------------
def test_a_claim_is_taken_once_and_a_closed_one_never() -> None:
    claim = side_work.Claim()
    assert claim.take()
    assert not claim.take()
    closed = side_work.Claim()
    closed.close()
    assert not closed.take()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="Linux /proc")
def test_a_cancelled_job_closes_its_claim() -> None:
    before = _fds()
    claim = side_work.Claim()
    assert len(_fds()) == len(before) + 3  # ends of two pipes, nothing on disk
    side_work.side_job("claim", lambda: None, forked=False, claim=claim).cancel()
    assert _fds() == before
    assert not claim.take()


@needs_fork
@pytest.mark.parametrize("child_first", [True, False])
def test_a_claim_goes_to_exactly_one_process_of_a_fork(child_first: bool) -> None:
    claim, took = side_work.Claim(), EVENTS.Event()
    if child_first:
        job = side_work.side_job("claim", lambda: (claim.take(), took.set())[0], True, claim)
        assert took.wait(60)
        assert not claim.take()
        assert job.result() is True
    else:
        job = side_work.side_job("claim", lambda: took.wait(60) and claim.take(), True, claim)
        assert claim.take()
        took.set()
        assert job.result() is False
    job.cancel()


@needs_fork
@pytest.mark.parametrize("parent_takes", [False, True])
def test_the_child_asks_once_the_parent_opens_the_claim_or_takes_it(parent_takes) -> None:
    claim, asked = side_work.Claim(), EVENTS.Event()
    job = side_work.side_job("claim", lambda: (claim.take_when_open(), asked.set())[0], True,
                             claim)
    assert not asked.wait(0.3)  # waiting for the parent
    if parent_takes:
        assert claim.take()
    else:
        claim.open()
    assert asked.wait(60)
    assert job.result() is not parent_takes
    assert not claim.take()
    job.cancel()


@needs_fork
def test_a_child_killed_after_claiming_fails_its_job_without_a_wait() -> None:
    claim = side_work.Claim()
    job = side_work.side_job(
        "claim", lambda: claim.take() and os.kill(os.getpid(), signal.SIGKILL), True, claim)
    job.process.join(60)
    assert job.process.exitcode == -signal.SIGKILL
    assert not claim.take()  # gone with the child: this process may not run it too
    with pytest.raises(RuntimeError, match="ended without a result"):
        job.result()
    job.cancel()


# The long probes --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    import transformers

    from attnlens.loaders.parity_inputs import save_tiny
    from attnlens.loaders.verify import tiny_config

    folder = tmp_path_factory.mktemp("gpt2")
    save_tiny(transformers.GPT2LMHeadModel, tiny_config("gpt2"), folder)
    return folder


def _measure(folder: Path, log: Path | None = None):
    """A fed ``LmHeads`` on the tiny GPT-2 whose long probes append their process's id to
    ``log`` (a forked child's too)."""
    from attnlens.loaders import load_model
    from tests.lm_heads_toys import fed_lm_heads

    model = load_model(folder)
    lm = fed_lm_heads(model)
    if log is not None:
        runs = lm._long_runs

        def logged(*args, **kwargs):
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()}\n")
            return runs(*args, **kwargs)

        lm._long_runs = logged
    return model, lm


def _ran_in(log: Path) -> list[int]:
    return [int(pid) for pid in log.read_text().split()] if log.exists() else []


@needs_fork
def test_the_child_runs_the_long_probes_when_it_reaches_them_first(tiny_gpt2, tmp_path) -> None:
    """``analyze``'s probes job: the child, done with the rest before this process needs the
    long probes, runs them too once this process opens the claim (its passes over); this
    process takes them from its result (the same bits)."""
    model, whole = _measure(tiny_gpt2)
    whole = whole.compute(model)
    stopwatch.PHASES.clear()
    log = tmp_path / "long.log"
    model, lm = _measure(tiny_gpt2, log)
    job = report._probes_beside(model, [SimpleNamespace(name="lm_heads", lm=lm)], forked=True)
    try:
        job.claim.open()
        deadline = time.monotonic() + 120
        while not _ran_in(log) and time.monotonic() < deadline:
            time.sleep(0.02)
        split = lm.compute(model)
    finally:
        job.cancel()
    assert _ran_in(log) == [job.process.pid]
    assert side_work.SIDE_PREFIX + stopwatch.LONG_PROBES in stopwatch.PHASES  # run.json says
    assert stopwatch.LONG_PROBES not in stopwatch.PHASES
    assert_same_measure(whole, split)


@needs_fork
def test_this_process_runs_the_long_probes_when_it_needs_them_first(tiny_gpt2,
                                                                    tmp_path) -> None:
    """This process claims the long probes before the child asks: it runs them, the child
    leaves them out (the same bits)."""
    from attnlens.report.side_work import Claim, side_job

    model, whole = _measure(tiny_gpt2)
    whole = whole.compute(model)
    stopwatch.PHASES.clear()
    log = tmp_path / "long.log"
    model, lm = _measure(tiny_gpt2, log)
    claim, claimed = Claim(), EVENTS.Event()

    def here() -> bool:
        took = claim.take()
        claimed.set()
        return took

    job = side_job("probes", functools.partial(
        lm.synthetic_runs, model, long=lambda: claimed.wait(60) and claim.take()), True, claim)
    lm.use_synthetic_runs(job.result, long_here=here)
    try:
        split = lm.compute(model)
    finally:
        job.cancel()
    assert _ran_in(log) == [os.getpid()]
    assert stopwatch.LONG_PROBES in stopwatch.PHASES
    assert side_work.SIDE_PREFIX + stopwatch.LONG_PROBES not in stopwatch.PHASES
    assert_same_measure(whole, split)


@needs_fork
def test_a_probes_child_killed_after_claiming_the_long_probes_fails_the_measure(
        tiny_gpt2) -> None:
    """The child claims the long probes and dies: this process does not wait for ever, and
    fails as it does when the child dies otherwise."""
    from attnlens.report.side_work import Claim, side_job

    model, lm = _measure(tiny_gpt2)
    claim = Claim()

    def claimed_then_killed() -> bool:
        if claim.take():
            os.kill(os.getpid(), signal.SIGKILL)
        return False

    job = side_job("probes", functools.partial(lm.synthetic_runs, model,
                                               long=claimed_then_killed), True, claim)
    lm.use_synthetic_runs(job.result, long_here=claim.take)
    job.process.join(120)
    assert job.process.exitcode == -signal.SIGKILL
    try:
        with pytest.raises(RuntimeError, match="ended without a result"):
            lm.compute(model)
    finally:
        job.cancel()


def test_without_side_workers_this_process_runs_every_probe(tiny_gpt2, tmp_path,
                                                             monkeypatch) -> None:
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "0")
    log = tmp_path / "long.log"
    model, lm = _measure(tiny_gpt2, log)
    forked = side_work.side_workers_allowed(model)
    assert not forked
    assert report._probes_beside(model, [SimpleNamespace(name="lm_heads", lm=lm)],
                                 forked) is None
    assert lm.compute(model).facts["long_probes"] >= 1
    assert _ran_in(log) == [os.getpid()]


def test_a_wait_inside_a_phase_is_left_out_of_it() -> None:
    """The probes' child waits for the parent's go inside its probes' phase; run.json's
    figure for them leaves the wait out (``stopwatch.outside``)."""
    with stopwatch.phase("work"), stopwatch.outside("work"):
        time.sleep(0.3)
    assert 0.0 <= stopwatch.PHASES["work"] < 0.1
