"""Output folders appear complete or not at all and never replace what they did not make;
run manifests name what changed."""

from __future__ import annotations

import hashlib
import os

import pytest

from attnlens.errors import ConfigError, DataError
from attnlens.runs.io import atomic_write_bytes, path_inside, safe_filename
from attnlens.runs.manifest import build_manifest, manifest_differences, sha256_file
from attnlens.runs.outputs import MANIFEST_FILE, OutputFolder, interrupt_note, publish_folder


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _siblings(parent) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_a_new_folder_appears_whole_with_nothing_beside_it(tmp_path):
    out = tmp_path / "a" / "b" / "report"
    with OutputFolder(out).writing() as work:
        assert work.parent == out.parent and work != out and not out.exists()
        (work / "table.csv").write_text("x\n1\n")
    assert _files(out) == {"table.csv": b"x\n1\n"}
    assert _siblings(out.parent) == ["report"]


def test_a_failed_run_leaves_no_folder_and_no_parents_it_made(tmp_path):
    out = tmp_path / "new" / "report"
    with pytest.raises(RuntimeError), OutputFolder(out).writing() as work:
        (work / "half.csv").write_text("x\n")
        raise RuntimeError("crash")
    assert _siblings(tmp_path) == []
    assert "nothing was written" in interrupt_note()


def test_a_non_empty_folder_is_refused_without_force(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(ConfigError, match=r"is not empty.*--force"):
        OutputFolder(out).check()
    assert _files(out) == {"thesis.tex": b"years of work"}


def test_an_empty_existing_folder_is_taken_over(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    with OutputFolder(out).writing() as work:
        (work / "a.txt").write_text("a")
    assert _files(out) == {"a.txt": b"a"}


def test_force_replaces_the_folder_as_a_whole_never_mixing(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old_table.csv").write_text("old")
    (out / "model.safetensors.index.json").write_text("{}")  # a stale shard index
    with OutputFolder(out, force=True).writing() as work:
        (work / "model.safetensors").write_bytes(b"new")
    assert _files(out) == {"model.safetensors": b"new"}
    assert _siblings(tmp_path) == ["run"]


def test_force_keeps_the_old_folder_until_the_new_one_is_complete(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.csv").write_text("old")
    with pytest.raises(RuntimeError), OutputFolder(out, force=True).writing() as work:
        (work / "new.csv").write_text("new")
        raise RuntimeError("crash half way")
    assert _files(out) == {"old.csv": b"old"}
    assert _siblings(tmp_path) == ["run"]


@pytest.mark.parametrize("flags", [{}, {"force": True}])
def test_the_source_model_and_its_parents_are_never_targets(tmp_path, flags):
    model = tmp_path / "models" / "minilm"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    for target in (model, tmp_path / "models"):
        with pytest.raises(ConfigError, match="the source model"):
            OutputFolder(target, option="--export", protected=[("the source model", model)],
                         **flags).check()
    assert (model / "config.json").read_text() == "{}"
    # a new folder inside the model folder is fine
    OutputFolder(model / "export", protected=[("the source model", model)], **flags).check()


def test_a_folder_holding_an_input_file_is_never_replaced(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "pairs.csv").write_text("a,b,1\n")
    with pytest.raises(ConfigError, match="holds the input file --data"):
        OutputFolder(data, force=True,
                     protected=[("the input file --data", data / "pairs.csv")]).check()


def test_the_current_folder_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="current or home folder"):
        OutputFolder(".", force=True).check()
    with pytest.raises(ConfigError, match="current or home folder"):
        OutputFolder(tmp_path.parent, force=True).check()


def test_a_file_or_an_unwritable_place_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        OutputFolder(tmp_path / "file").check()
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        OutputFolder(tmp_path / "file" / "sub").check()
    if os.geteuid() != 0:  # root writes anywhere: the check cannot fail
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="not writable"):
            OutputFolder(locked / "out").check()


def test_a_resumable_run_keeps_its_progress_after_a_crash_but_not_after_bad_input(tmp_path):
    out = tmp_path / "run"
    folder = OutputFolder(out, resumable=True)
    with pytest.raises(MemoryError), folder.writing({"command": "x"}) as work:
        (work / "prune_curve.csv").write_text("step\n0\n")
        folder.progress = "1 of 4 pruning steps"
        raise MemoryError
    assert (tmp_path / ".run.partial" / "prune_curve.csv").is_file()
    assert interrupt_note() == f"kept 1 of 4 pruning steps in {tmp_path / '.run.partial'}"
    assert not out.exists()
    # the next run must say what to do with it
    with pytest.raises(ConfigError, match=r"interrupted run.*--resume.*--force"):
        OutputFolder(out, resumable=True).check()
    # a user-input error discards it
    folder = OutputFolder(out, resumable=True, resume=True)
    with pytest.raises(DataError), folder.writing({"command": "x"}) as work:
        raise DataError("bad scores")
    assert _siblings(tmp_path) == []


def test_resume_continues_the_partial_run_and_publishes_it(tmp_path):
    out = tmp_path / "run"
    manifest = {"command": "prune", "options": {"step": 0.1}}
    with pytest.raises(KeyboardInterrupt), OutputFolder(out, resumable=True).writing(
        manifest
    ) as work:
        (work / "rows.csv").write_text("1\n")
        raise KeyboardInterrupt
    folder = OutputFolder(out, resumable=True, resume=True).check()
    changed = {**manifest, "options": {"step": 0.25}}
    with pytest.raises(ConfigError, match=r"--resume refused: --step was 0\.1, now 0\.25"):
        folder.verify_manifest(changed)
    folder.verify_manifest(manifest)
    with folder.writing(manifest) as work:
        assert (work / "rows.csv").read_text() == "1\n"
        (work / "rows.csv").write_text("1\n2\n")
    assert (out / "rows.csv").read_text() == "1\n2\n"
    assert '"complete": true' in (out / MANIFEST_FILE).read_text()
    # a finished run resumes as complete; a non-attnlens folder cannot be resumed
    assert OutputFolder(out, resumable=True, resume=True).check().resumes_complete
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("x")
    with pytest.raises(ConfigError, match="holds no attnlens run"):
        OutputFolder(other, resumable=True, resume=True).check()


def test_publish_refuses_a_target_filled_meanwhile_and_keeps_the_work(tmp_path):
    work, target = tmp_path / ".t.tmp", tmp_path / "t"
    work.mkdir()
    (work / "new").write_text("n")
    target.mkdir()
    (target / "theirs").write_text("t")
    with pytest.raises(ConfigError, match="filled by something else"):
        publish_folder(work, target)
    assert _files(target) == {"theirs": b"t"} and _files(work) == {"new": b"n"}


def test_atomic_write_leaves_the_old_file_or_the_new_one(tmp_path):
    path = tmp_path / "t.csv"
    atomic_write_bytes(path, b"old")

    with pytest.raises(TypeError):
        atomic_write_bytes(path, object())  # fails inside the write
    assert path.read_bytes() == b"old" and _siblings(tmp_path) == ["t.csv"]


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "..", ".hidden", "a/b\\c", "nmod:poss",
                                  "", "…"])
def test_names_made_from_data_stay_inside_the_folder(tmp_path, name):
    safe = safe_filename(name)
    assert "/" not in safe and "\\" not in safe and not safe.startswith(".")
    assert path_inside(tmp_path, safe).parent == tmp_path.resolve()


def test_path_inside_refuses_escapes(tmp_path):
    for name in ("../x", "/tmp/x", "a/../../x"):
        with pytest.raises(ConfigError, match="outside"):
            path_inside(tmp_path, name)


# Manifests -----------------------------------------------------------------------------------
def test_sha256_matches_hashlib_and_the_cache_follows_changes(tmp_path, monkeypatch):
    import attnlens.runs.manifest as manifest

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(manifest, "_CACHE_MIN_BYTES", 0)  # cache even small files
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 1000)
    assert sha256_file(path) == hashlib.sha256(b"a" * 1000).hexdigest()
    assert (tmp_path / "cache" / "attnlens" / "sha256.json").is_file()
    path.write_bytes(b"b" * 1000)  # same size: the modification time tells
    os.utime(path, ns=(1, 1))
    assert sha256_file(path) == hashlib.sha256(b"b" * 1000).hexdigest()


def test_manifest_differences_name_inputs_options_and_model(tmp_path):
    data = tmp_path / "pairs.csv"
    data.write_text("a,b,1\n")
    before = build_manifest("prune", {"step": 0.1, "out": "x", "quiet": True},
                            inputs={"data": data})
    assert "out" not in before["options"] and "quiet" not in before["options"]
    data.write_text("a,b,2\n")
    after = build_manifest("prune", {"step": 0.25, "out": "y", "quiet": False},
                           inputs={"data": data})
    differences = manifest_differences(before, after)
    assert len(differences) == 2
    assert differences[0].startswith(f"the contents of --data ({data}) changed (sha256 ")
    assert differences[1] == "--step was 0.1, now 0.25"
    assert manifest_differences(before, before) == []
    model_a = {**before, "model": {"sha256": "a" * 64}}
    model_b = {**before, "model": {"sha256": "b" * 64}}
    assert manifest_differences(model_a, model_b) == [
        "the model's files changed (sha256 aaaaaaaaaaaa… then, bbbbbbbbbbbb… now)"
    ]


def test_the_embedded_model_fingerprint_covers_weights_config_and_tokenizer():
    from attnlens.loaders.checkpoint import checkpoint_fingerprint

    fingerprint = checkpoint_fingerprint(None)
    assert {"config.json", "model.safetensors"} <= set(fingerprint["files"])
    assert any(name.startswith(("tokenizer", "vocab")) for name in fingerprint["files"])
    assert len(fingerprint["sha256"]) == 64


# Export ----------------------------------------------------------------------------------------
def _tiny_bert(path):
    from transformers import BertConfig, BertModel

    from attnlens.loaders import load_model
    from tests.parity_utils import TINY, VOCAB, save_tiny

    save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), path)
    return load_model(path)


def test_export_over_a_sharded_checkpoint_leaves_no_old_index(tmp_path):
    """Issue 15, failure 1: an old model.safetensors.index.json beside a new export made the
    folder load as the old model."""
    import torch
    from transformers import BertConfig, BertModel

    from attnlens.loaders import load_model
    from attnlens.loaders.export import export_hf
    from attnlens.measures.pruning import prune_heads
    from tests.parity_utils import TINY, VOCAB

    model = _tiny_bert(tmp_path / "src")
    old = BertModel(BertConfig(vocab_size=VOCAB, **TINY))
    old.save_pretrained(str(tmp_path / "target"), max_shard_size="20KB")  # sharded
    assert (tmp_path / "target" / "model.safetensors.index.json").is_file()
    pruned = prune_heads(model, torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]]))
    with pytest.raises(ConfigError, match="is not empty"):
        export_hf(pruned, tmp_path / "target")
    export_hf(pruned, tmp_path / "target", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "target").iterdir()) == [
        "config.json", "model.safetensors"]
    back = load_model(tmp_path / "target")
    ids = torch.tensor([[2, 7, 9, 3]])
    with torch.no_grad():  # the exported model, not the old shards: same outputs as pruned
        torch.testing.assert_close(back(ids), pruned(ids), rtol=0, atol=1e-5)


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_never_replaces_the_source_model(tmp_path, overwrite):
    from attnlens.loaders.export import export_hf

    model = _tiny_bert(tmp_path / "src")
    before = _files(tmp_path / "src")
    for target in (tmp_path / "src", tmp_path):
        with pytest.raises(ConfigError, match="the source model"):
            export_hf(model, target, overwrite=overwrite)
    assert _files(tmp_path / "src") == before


def test_a_partial_folder_without_progress_is_not_a_run(tmp_path):
    """Killed before its first result: only the manifest was written; the next run starts
    over without asking for --resume or --force."""
    partial = tmp_path / ".run.partial"
    partial.mkdir()
    (partial / MANIFEST_FILE).write_text('{"command": "old"}')
    folder = OutputFolder(tmp_path / "run", resumable=True).check()
    folder.verify_manifest({"command": "new"})
    with folder.writing({"command": "new"}) as work:
        (work / "t.csv").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert '"command": "new"' in (tmp_path / "run" / MANIFEST_FILE).read_text()


@pytest.mark.parametrize("worker_thread", [False, True])
def test_an_interruption_while_the_work_folder_is_made_leaves_nothing(
        tmp_path, monkeypatch, worker_thread):
    """Ctrl-C right after the work folder appears (before clean-up is armed) removes it,
    also while another thread runs (the OS may deliver the signal to that thread; solver
    and figure pools are such threads)."""
    import signal
    import threading

    stop = threading.Event()
    if worker_thread:
        threading.Thread(target=stop.wait, daemon=True).start()
    made = OutputFolder._open_work

    def open_then_interrupt(self):
        work = made(self)
        os.kill(os.getpid(), signal.SIGINT)  # Python's default handler: KeyboardInterrupt
        return work

    monkeypatch.setattr(OutputFolder, "_open_work", open_then_interrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), OutputFolder(tmp_path / "rep").writing():
            pytest.fail("the body must not run")  # the held-back signal is raised first
    finally:
        signal.signal(signal.SIGINT, previous)
        stop.set()
    assert list(tmp_path.iterdir()) == []
    assert interrupt_note() == "nothing was written (" + str(tmp_path / "rep") + " is unchanged)"


def _python(code: str) -> str:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return result.stdout.strip()


def test_importing_the_writers_leaves_the_umask_alone():
    """No module sets the process's umask when it is imported (it used to flip it to 0 and
    back at import time, a window in which another thread's new files were world-writable)."""
    calls = _python(
        "import os\n"
        "calls, real = [], os.umask\n"
        "os.umask = lambda mask: (calls.append(mask), real(mask))[1]\n"
        "import attnlens.runs.io, attnlens.runs.outputs, attnlens.runs.checkpointing\n"
        "print(calls)\n"
    )
    assert calls == "[]"


def test_files_and_folders_follow_the_umask_at_the_time_they_are_written(tmp_path):
    """Permissions are those of a plain open()/mkdir() under the umask in force when the file is
    written, also when the umask changed after import."""
    modes = _python(
        "import os, stat\n"
        "from pathlib import Path\n"
        "os.umask(0o022)\n"
        "from attnlens.runs.io import atomic_write_text\n"
        "from attnlens.runs.outputs import OutputFolder\n"
        "os.umask(0o077)\n"
        f"root = Path({str(tmp_path)!r})\n"
        "atomic_write_text(root / 'table.csv', 'x\\n')\n"
        "with OutputFolder(root / 'out').writing() as work:\n"
        "    (work / 'a.csv').write_text('x')\n"
        "print(oct(stat.S_IMODE((root / 'table.csv').stat().st_mode)),"
        " oct(stat.S_IMODE((root / 'out').stat().st_mode)))\n"
    )
    assert modes == "0o600 0o700"
