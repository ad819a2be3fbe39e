"""The environment's failures as one line with a next step (cli/known_errors.py), the checks of
a write target (attnlens/runs/io.check_writable_target), and inputs a model cannot read.

Before: torch's "can't allocate memory" was not recognised as out of memory (a traceback),
``OSError`` other than permission and disk-full gave tracebacks, a read-only mount or an
``--out`` that is a dangling symbolic link failed after the whole run.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from attnlens.cli.known_errors import is_memory_error, known_error

from attnlens.errors import ConfigError, DataError
from attnlens.runs.io import check_writable_target


@pytest.mark.parametrize("exc", [
    MemoryError(),
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                 "allocate memory: you tried to allocate 172000000000 bytes. Error code 12 "
                 "(Cannot allocate memory)"),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    RuntimeError("std::bad_alloc"),
    RuntimeError("Unable to allocate 8.00 GiB for an array with shape (1000000, 1000)"),
    type("OutOfMemoryError", (RuntimeError,), {})("no words at all"),
])
def test_memory_errors_in_any_wording(exc):
    assert is_memory_error(exc)
    message = known_error(exc, ["--bootstrap 1000000000 (default 1000)"], has_batching=True)
    assert message.startswith("out of memory") and "lower --bootstrap 1000000000" in message


def test_the_memory_message_says_how_much_was_asked():
    exc = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                       "172000000000 bytes.")
    assert known_error(exc, [], True) == ("out of memory (it asked for 172 GB at once); lower "
                                          "--batch-size or --max-length.")
    assert "a smaller model or input" in known_error(MemoryError(), [], False)


def test_a_bug_keeps_its_traceback():
    assert known_error(RuntimeError("shape mismatch")) is None
    assert known_error(ValueError("x")) is None
    assert known_error(OSError("no errno, no file")) is None


@pytest.mark.parametrize(("code", "expected"), [
    (errno.EROFS, "is on a read-only file system; write to a folder on a writable disk"),
    (errno.ENAMETOOLONG, "a file name is too long"),
    (errno.ENOTDIR, "a part of this path is a file, not a folder"),
    (errno.EACCES, "permission denied: /x/y; choose a place you can write to"),
    (errno.ENOSPC, "no space left on the device"),
    (errno.EDQUOT, "disk quota exceeded"),
    (errno.EMFILE, "too many open files"),
    (errno.ENOENT, "cannot use /x/y: .*; check the path"),
])
def test_os_errors_by_errno(code, expected):
    import re

    exc = (PermissionError if code == errno.EACCES else OSError)(code, os.strerror(code), "/x/y")
    assert re.search(expected, known_error(exc))


def test_memory_errors_of_real_commands_name_the_sizes_given(tmp_path):
    """A real process: ``collapse --synthetic --width 1000000`` asks torch for 4 TB at once."""
    result = subprocess.run([sys.executable, "-m", "attnlens.cli.app", "collapse", "--synthetic",
                             "--width", "1000000", "--quiet", "--out", "out"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: out of memory (it asked for ")
    assert "lower --width 1000000" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


# Write targets ------------------------------------------------------------------------------
def test_a_dangling_symbolic_link_is_refused_before_the_run(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "gone" / "deeper")
    with pytest.raises(ConfigError, match=r"is a symbolic link to .*gone/deeper, which does not "
                                          r"exist; remove the link"):
        check_writable_target(tmp_path / "out", "--out")


def test_names_are_checked_with_what_the_work_folder_adds(tmp_path):
    check_writable_target(tmp_path / ("a" * 241), "--out", added=14)  # 255 bytes: fine
    with pytest.raises(ConfigError, match="is 256 bytes long"):
        check_writable_target(tmp_path / ("a" * 242), "--out", added=14)
    with pytest.raises(ConfigError, match="is 256 bytes long"):  # bytes, not characters
        check_writable_target(tmp_path / ("é" * 121), "--out", added=14)


def test_a_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "notes").write_text("x")
    with pytest.raises(ConfigError, match="notes is a file, not a folder"):
        check_writable_target(tmp_path / "notes" / "deeper" / "out", "--out")


def _mount_read_only(source: Path, target: Path) -> None:
    """``source`` seen read-only at ``target`` (a bind mount); skips where mounting is not
    allowed (the catalogue rows out-read-only and view-out-read-only simulate the flag)."""
    target.mkdir()
    steps = [["mount", "--bind", str(source), str(target)],
             ["mount", "-o", "remount,bind,ro", str(target)]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", str(target)], capture_output=True)
            pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")


@pytest.fixture
def read_only(tmp_path):
    """A read-only mount of ``tmp_path/src`` at ``tmp_path/ro`` holding a report folder."""
    source = tmp_path / "src"
    (source / "report" / "tables").mkdir(parents=True)
    (source / "report" / "run.json").write_text("{}")
    (source / "report" / "tables" / "t.csv").write_text("layer,head,value\n0,0,0.5\n")
    _mount_read_only(source, tmp_path / "ro")
    yield tmp_path / "ro"
    subprocess.run(["umount", str(tmp_path / "ro")], check=True)


@pytest.mark.parametrize("args", [
    ["spectrum", "--out", "ro/out"],
    ["view", "Hi there.", "--out", "ro/page.html"],
    ["report", "ro/report"],
], ids=["out", "view-out", "report"])
def test_a_read_only_mount_is_refused_before_the_run(read_only, tmp_path, args):
    assert os.statvfs(read_only).f_flag & os.ST_RDONLY
    result = subprocess.run([sys.executable, "-m", "attnlens.cli.app", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "ATTNLENS_FORBID_MODEL_LOAD": "1"})
    assert result.returncode == 1
    assert "is on a read-only file system; choose a folder on a writable disk" in \
        result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# Inputs a model cannot read -----------------------------------------------------------------
def test_an_input_without_tokens_is_refused_by_the_model():
    import torch

    from attnlens.loaders import load_model

    model = load_model()
    with pytest.raises(DataError, match="the input has no tokens"):
        model(torch.zeros(1, 0, dtype=torch.long))


def test_a_tokenizer_past_the_embedding_is_refused_at_load(tmp_path):
    import json

    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertModel

    from attnlens.errors import ModelLoadError
    from attnlens.loaders import load
    from tests.parity_utils import TINY, save_tiny
    from tests.pruning_toys import vocab_size, word_tokenizer

    save_tiny(BertModel, BertConfig(vocab_size=vocab_size() - 4, **TINY), tmp_path)
    word_tokenizer().hf.save_pretrained(str(tmp_path))
    with pytest.raises(ModelLoadError, match=f"gives token ids up to {vocab_size() - 1}, but the "
                                             f"model has {vocab_size() - 4} embedding rows"):
        load(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["vocab_size"] = vocab_size()
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = load_file(tmp_path / "model.safetensors")
    name = "embeddings.word_embeddings.weight"
    tensors[name] = tensors[name].new_zeros(vocab_size(), tensors[name].shape[1])
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    load(tmp_path)  # the same tokenizer with a large enough embedding loads


def test_quiet_silences_the_false_indexing_warning(tmp_path):
    """transformers warns that a text longer than the model's positions "will result in
    indexing errors"; attnlens truncates to --max-length itself, so the warning is false."""
    (tmp_path / "long.txt").write_text(" ".join(["word"] * 700) + "\n")
    result = subprocess.run([sys.executable, "-m", "attnlens.cli.app", "spectrum", "--text",
                             "long.txt", "--quiet", "--out", "out"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "indexing errors" not in result.stderr and "[transformers]" not in result.stderr
    assert Path(tmp_path / "out" / "index.html").is_file()
