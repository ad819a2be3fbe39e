"""Two runs never write the same output folder at once (attnlens/runs/folder_lock.py).

Real processes: a first ``attnlens`` run is paused (SIGSTOP) once it holds its lock, so the
second run meets it running whatever the machine's speed; the second is refused at once,
naming the first; the first, resumed, publishes a complete folder. A run killed with SIGKILL
leaves a stale lock: the next run says so and how to go on, and ``--resume``/``--force``
clear it. Before the lock, two runs into one ``--out`` wrote into the same ``.OUT.partial``
and one printed success over the other's tables.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlens.errors import ConfigError
from attnlens.runs import folder_lock
from attnlens.runs.outputs import OutputFolder

SPECTRUM = ["spectrum", "--quiet", "--batch-size", "4", "--out", "out"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnlens.cli.app", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlens.cli.app", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _wait_for_lock(process: subprocess.Popen, lock: Path) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if lock.is_file():
            try:
                return json.loads(lock.read_text())
            except ValueError:
                pass  # being written
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    process.kill()
    raise AssertionError("the first run never took its lock")


def test_a_second_run_into_the_same_folder_is_refused_naming_the_first(tmp_path):
    first = _start(SPECTRUM, tmp_path)
    holder = _wait_for_lock(first, tmp_path / ".out.lock")
    first.send_signal(signal.SIGSTOP)  # holds the lock for as long as the test needs
    try:
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        started = time.monotonic()
        second = _run(["analyze", "--quiet", "--out", "out", "--force"], tmp_path)
        assert time.monotonic() - started < 60  # refused at once, not after a run
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert f"--out out is being written by another attnlens run (pid {first.pid} " in lines[0]
    assert "attnlens spectrum --quiet" in lines[0] and "choose another --out" in lines[0]
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert list((tmp_path / "out" / "tables").glob("*.csv")), "the first run's tables"
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "spectrum" in run["command"]  # the first run's folder, not a mix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no lock, no work folder


def test_a_killed_run_leaves_a_stale_lock_that_is_reported_and_cleared(tmp_path):
    args = ["analyze", "--quiet", "--batch-size", "4", "--checkpoint-every", "4", "--out", "out"]
    first = _start(args, tmp_path)
    checkpoint = tmp_path / ".out.partial" / "checkpoint" / "latest.json"
    deadline = time.monotonic() + 600
    while not checkpoint.is_file() and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert (tmp_path / ".out.lock").is_file()
    again = _run(args, tmp_path)
    assert again.returncode == 1
    message = again.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert f"locked by an attnlens run that is no longer running (pid {first.pid} " in message
    assert "add --resume to continue what it kept" in message and "--force" in message
    assert str(tmp_path / ".out.lock") in message
    resumed = _run([*args, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# The lock in one process ----------------------------------------------------------------------
def _holder(pid: int, host: str | None = None, start: str | None = None) -> str:
    return json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "then",
                       "command": "attnlens analyze --out out", "process_start": start})


def test_one_process_may_check_its_folder_twice_and_releases_it(tmp_path):
    folder = OutputFolder(tmp_path / "out")
    folder.check()
    lock = tmp_path / ".out.lock"
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    again = OutputFolder(tmp_path / "out").check()  # re-entrant in one process
    with again.writing() as work:
        (work / "t.csv").write_text("x\n")
    assert lock.is_file()  # the first OutputFolder still uses it
    folder_lock.release_all()
    assert not lock.exists()


def test_a_failed_check_releases_the_lock(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not empty"):
        OutputFolder(tmp_path / "out").check()
    assert not (tmp_path / ".out.lock").exists()


def test_a_recycled_process_id_is_not_taken_for_the_run(tmp_path):
    """The pid is alive (this process) but started at another tick: the lock is stale."""
    (tmp_path / ".out.lock").write_text(_holder(os.getpid(), start="1"))
    if folder_lock._process_start(os.getpid()) is None:
        pytest.skip("no /proc start ticks here: a recycled pid cannot be told apart")
    with pytest.raises(ConfigError, match="no longer running"):
        OutputFolder(tmp_path / "out").check()
    OutputFolder(tmp_path / "out", force=True).check()  # --force clears it
    assert json.loads((tmp_path / ".out.lock").read_text())["process_start"] != "1"
    folder_lock.release_all()


def test_a_lock_from_another_host_is_respected(tmp_path):
    (tmp_path / ".out.lock").write_text(_holder(1, host="elsewhere"))
    with pytest.raises(ConfigError, match=r"being written by another attnlens run \(pid 1 on "
                                          r"elsewhere.*if no such run is going on on elsewhere"):
        OutputFolder(tmp_path / "out", force=True).check()  # --force never breaks a live lock
    assert (tmp_path / ".out.lock").is_file()


def test_a_lock_in_a_folder_made_later_is_taken_when_writing(tmp_path):
    out = tmp_path / "new" / "out"
    folder = OutputFolder(out).check()
    assert not (tmp_path / "new").exists()
    with folder.writing() as work:
        assert (tmp_path / "new" / ".out.lock").is_file()
        (work / "t.csv").write_text("x\n")
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["out"]
