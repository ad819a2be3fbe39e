"""Real processes killed with SIGKILL or interrupted with SIGINT resume to the tables of an
uninterrupted run; Ctrl-C prints one line saying what was kept and how to resume."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures import run_cli, start_cli
from tests.pruning_toys import write_pairs


def _wait_for(process: subprocess.Popen, ready, what: str, timeout: float = 600) -> None:
    """Poll until ``ready()``; fail if the process ends first (it must be cut mid-run)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            pytest.fail(f"the run ended ({process.returncode}) before {what}: "
                        f"{process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _stderr_at_exit(process: subprocess.Popen, timeout: float = 120) -> str:
    """The process's stderr once it has exited; killed (and the test failed) if it hangs."""
    try:
        return process.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"the interrupted run did not exit within {timeout:g} s")


def _rows(path: Path) -> int:
    try:
        return max(len(path.read_text().splitlines()) - 1, 0)
    except OSError:
        return 0


# prune ---------------------------------------------------------------------------------------
def _prune_args(rescore: bool) -> list[str]:
    # The embedded MiniLM on 40 pairs: each step takes long enough to be cut between steps.
    return ["prune", "--metric", "sts", "--pairs", "pairs.csv", "--order", "importance,random",
            "--seeds", "1", "--step", "0.25", "--max-fraction", "0.75", "--batch-size", "16",
            "--out", "out", "--quiet", *(["--rescore"] if rescore else [])]


def _tables(out: Path) -> dict[str, pd.DataFrame]:
    curve = pd.read_csv(out / "prune_curve.csv", keep_default_na=False).drop(columns="seconds")
    return {"curve": curve, "scores": pd.read_csv(out / "prune_scores.csv")}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("data") / "pairs.csv", 40)


@pytest.mark.parametrize("rescore", [False, True], ids=["once", "rescore"])
def test_prune_killed_with_sigkill_resumes_to_the_uninterrupted_tables(pairs, tmp_path, rescore):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for folder in (whole, cut):
        folder.mkdir()
        (folder / "pairs.csv").write_bytes(pairs.read_bytes())
    run_cli(*_prune_args(rescore), cwd=whole, timeout=900, check=True)

    process = start_cli(*_prune_args(rescore), cwd=cut)
    partial_curve = cut / ".out.partial" / "prune_curve.csv"
    _wait_for(process, lambda: _rows(partial_curve) >= 3, "three rows of the curve")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (cut / "out").exists()  # nothing published: a run appears complete or not at all
    kept = _rows(partial_curve)
    assert 3 <= kept < len(_tables(whole / "out")["curve"])

    resumed = run_cli(*_prune_args(rescore), "--resume", cwd=cut, timeout=900, check=True)
    assert "unpruned" in resumed.stderr
    assert not (cut / ".out.partial").exists()
    expected, got = _tables(whole / "out"), _tables(cut / "out")
    for name in expected:  # same inputs, same order of work, saved scores reused: equal
        pd.testing.assert_frame_equal(got[name], expected[name], check_exact=True)
    assert sorted(p.name for p in (cut / "out").iterdir()) == sorted(
        p.name for p in (whole / "out").iterdir())


def test_ctrl_c_says_what_was_kept_and_the_resume_command_works(pairs, tmp_path):
    (tmp_path / "pairs.csv").write_bytes(pairs.read_bytes())
    process = start_cli(*_prune_args(False), cwd=tmp_path)
    partial_curve = tmp_path / ".out.partial" / "prune_curve.csv"
    _wait_for(process, lambda: _rows(partial_curve) >= 2, "two rows of the curve")
    process.send_signal(signal.SIGINT)
    err = _stderr_at_exit(process)
    assert process.returncode == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Interrupted: kept the pruning curves up to step "), err
    assert f"in {tmp_path / '.out.partial'}; resume with: attnlens prune " in lines[0]
    command = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert command[0] == "attnlens" and command[-1] == "--resume"
    run_cli(*command[1:], cwd=tmp_path, timeout=900, check=True)
    curve = pd.read_csv(tmp_path / "out" / "prune_curve.csv", keep_default_na=False)
    assert curve["step"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


@pytest.fixture(scope="module")
def long_text(tmp_path_factory) -> Path:
    """400 sentences of 60 words: a spectrum run over them lasts tens of seconds, so a signal
    sent once its work folder appears always arrives mid-run (the embedded sample corpus
    can finish first)."""
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "over", "hill", "quickly",
             "bird", "sang", "near", "river"]
    lines = (" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(60))
             for i in range(400))
    path = tmp_path_factory.mktemp("corpus") / "long.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _interrupt_spectrum(tmp_path: Path, text: Path, signum: int) -> tuple[int, str]:
    process = start_cli("spectrum", "--text", str(text), "--out", "rep", "--quiet",
                        cwd=tmp_path)
    # the work folder appears once the model is loaded and the corpus pass begins
    _wait_for(process, lambda: any(tmp_path.glob(".rep.*.tmp")), "the work folder")
    process.send_signal(signum)
    err = _stderr_at_exit(process)
    return process.returncode, err


def test_ctrl_c_before_any_progress_leaves_nothing(tmp_path, long_text):
    returncode, err = _interrupt_spectrum(tmp_path, long_text, signal.SIGINT)
    assert returncode == 130, err
    assert err.strip() == ("Interrupted: nothing was written (rep is unchanged); rerun with: "
                           f"attnlens spectrum --text {shlex.quote(str(long_text))} --out rep "
                           "--quiet")
    assert list(tmp_path.iterdir()) == []


def test_sigterm_is_handled_like_ctrl_c(tmp_path, long_text):
    returncode, err = _interrupt_spectrum(tmp_path, long_text, signal.SIGTERM)
    assert returncode == 143, err
    assert err.startswith("Interrupted: nothing was written"), err
    assert list(tmp_path.iterdir()) == []


# analyze / heads -----------------------------------------------------------------------------
def _not_checkpointable(command: str) -> list[str]:
    """Analyzers of ``command`` that do not declare their state (protocol v2)."""
    import attnlens
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.report.analyze import default_sections
    from attnlens.runs.checkpointing import declares_state

    model, tokenizer = attnlens.load()
    sections = default_sections() if command == "analyze" else [HeadRolesSection()]
    return sorted({type(a).__name__ for s in sections for a in s.analyzers(model, tokenizer)
                   if not declares_state(a)})


@pytest.mark.parametrize("command", ["analyze", "heads"])
def test_analysis_killed_with_sigkill_resumes_to_the_uninterrupted_tables(tmp_path, command):
    assert _not_checkpointable(command) == []  # every analyzer declares its state
    args = [command, "--out", "out", "--quiet", "--batch-size", "4", "--checkpoint-every", "4"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    run_cli(*args, cwd=whole, timeout=900, check=True)
    process = start_cli(*args, cwd=cut)
    latest = cut / ".out.partial" / "checkpoint" / "latest.json"
    _wait_for(process, latest.is_file, "the first checkpoint")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL and not (cut / "out").exists()
    run_cli(*args, "--resume", cwd=cut, timeout=900, check=True)
    tables = "tables"  # a report folder keeps its tables there
    expected = sorted(p.name for p in (whole / "out" / tables).glob("*.csv"))
    assert len(expected) >= (15 if command == "analyze" else 8), expected
    assert expected == sorted(p.name for p in (cut / "out" / tables).glob("*.csv"))
    for name in expected:  # bit-identical tables
        a, b = cut / "out" / tables / name, whole / "out" / tables / name
        assert a.read_bytes() == b.read_bytes(), name
    assert not (cut / "out" / "checkpoint").exists()


def test_resume_in_another_folder_refuses_a_changed_corpus(tmp_path):
    """A corpus edited at the same path is named, not mixed in (issue 15, failure 2)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\nA dog ran.\n")
    partial = tmp_path / ".out.partial"
    (partial / "checkpoint").mkdir(parents=True)  # progress: a partial run, not an empty start
    (partial / "checkpoint" / "latest.json").write_text("{}")
    from attnlens.runs.io import atomic_write_json
    from attnlens.runs.manifest import build_manifest

    options = {"text": str(corpus)}
    atomic_write_json(partial / "manifest.json",
                      {**build_manifest("spectrum", options, {"text": corpus}),
                       "complete": False})
    corpus.write_text("The cat sat on the mat.\nA dog ran far.\n")
    from attnlens.errors import ConfigError
    from attnlens.runs.outputs import OutputFolder

    folder = OutputFolder(tmp_path / "out", resume=True, resumable=True).check()
    with pytest.raises(ConfigError, match=r"the contents of --text \(.*corpus.txt\) changed"):
        folder.verify_manifest(build_manifest("spectrum", options, {"text": corpus}))
    assert sorted(os.listdir(partial)) == ["checkpoint", "manifest.json"]
