"""Sharded checkpoints in the Hugging Face cache layout load by hub id (issue 23, item 5).

The cache stores every file of a snapshot as a link into the repository's blobs:
``models--org--name/snapshots/<commit>/model-00001-of-00002.safetensors -> ../../blobs/<sha>``.
A shard named by the index must lie in the snapshot folder by name; its target may be a blob
of the same cache repository, never a file anywhere else.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlens.errors import ModelLoadError
from tests.parity_utils import TINY, VOCAB, save_tiny

REPO_ID = "tiny-org/sharded-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def sharded_folder(path: Path) -> Path:
    """A tiny BERT saved in several safetensors shards with its index, plus a tokenizer."""
    from transformers import BertConfig, BertModel

    from tests.pruning_toys import word_tokenizer

    plain = path / "plain"
    hf = save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), plain)
    for name in plain.glob("*.safetensors*"):
        name.unlink()
    hf.save_pretrained(str(plain), max_shard_size="40KB")
    word_tokenizer().hf.save_pretrained(str(plain))
    assert len(list(plain.glob("model-*.safetensors"))) >= 2
    return plain


def cache_layout(plain: Path, cache: Path, repo_id: str = REPO_ID) -> Path:
    """``plain``'s files as a Hugging Face hub cache entry under ``cache``: every file a
    relative link from the snapshot into ``blobs`` (as huggingface_hub writes it)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / COMMIT
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for file in sorted(plain.iterdir()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, blobs / digest)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    return snapshot


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return sharded_folder(tmp_path_factory.mktemp("sharded"))


@pytest.fixture
def cache(tmp_path, plain, monkeypatch) -> Path:
    import huggingface_hub.constants

    hub = tmp_path / "hf_home" / "hub"
    cache_layout(plain, hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    return hub


def test_a_sharded_model_loads_by_hub_id_from_the_cache(cache, plain):
    from attnlens.loaders import load_model
    from attnlens.loaders.checkpoint import resolve_checkpoint, safetensors_files

    snapshot = resolve_checkpoint(REPO_ID)
    assert snapshot.parent.name == "snapshots"
    shards = safetensors_files(snapshot)
    assert len(shards) >= 2 and all(s.is_symlink() and s.parent == snapshot for s in shards)
    cached, local = load_model(REPO_ID), load_model(plain)
    ids = torch.arange(12).reshape(2, 6) % VOCAB
    with torch.no_grad():
        assert torch.equal(cached(ids), local(ids))  # the same weights, read through links


def test_the_command_line_loads_it_with_hf_home(tmp_path, plain):
    home = tmp_path / "home"
    cache_layout(plain, home / "hub")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE",
                                                            "HUGGINGFACE_HUB_CACHE")}
    env.update(HF_HOME=str(home), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli", "asymmetry", REPO_ID, "--weights-only", "--out",
         str(tmp_path / "out"), "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "tables" / "weight_asymmetry.csv").is_file()


def _relink(snapshot: Path, target: Path) -> str:
    """Point the snapshot's first shard at ``target``; returns the shard's name."""
    shard = sorted(snapshot.glob("model-*.safetensors"))[0]
    shard.unlink()
    shard.symlink_to(target)
    return shard.name


def test_a_link_out_of_the_cache_repository_is_refused(cache, tmp_path):
    from attnlens.loaders.checkpoint import resolve_checkpoint, safetensors_files

    snapshot = resolve_checkpoint(REPO_ID)
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copyfile(sorted(snapshot.glob("model-*.safetensors"))[0], outside)
    name = _relink(snapshot, outside)
    with pytest.raises(ModelLoadError, match=rf"names shard '{name}', a link to .*outside the "
                       r"model folder .*copy the shard files into the folder"):
        safetensors_files(snapshot)


def test_a_link_into_another_repositorys_blobs_is_refused(cache, plain):
    from attnlens.loaders.checkpoint import resolve_checkpoint, safetensors_files

    other = cache_layout(plain, cache, repo_id="tiny-org/other")
    snapshot = resolve_checkpoint(REPO_ID)
    blob = sorted(other.glob("model-*.safetensors"))[0].resolve()
    _relink(snapshot, blob)
    with pytest.raises(ModelLoadError, match="outside the model folder"):
        safetensors_files(snapshot)


@pytest.mark.parametrize("name", ["../blobs/x.safetensors", "/etc/passwd", "a/../../b"])
def test_a_shard_named_outside_the_snapshot_is_refused(cache, name):
    from attnlens.loaders.checkpoint import resolve_checkpoint, safetensors_files

    snapshot = resolve_checkpoint(REPO_ID)
    index = snapshot / "model.safetensors.index.json"
    content = json.loads(index.read_text())
    content["weight_map"] = {"w": name}
    index.unlink()  # a link into blobs: replace it by a plain file
    index.write_text(json.dumps(content))
    with pytest.raises(ModelLoadError, match="outside its folder; an index may only name"):
        safetensors_files(snapshot)
