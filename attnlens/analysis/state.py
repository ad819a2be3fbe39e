"""Analyzer states as files: tensors in safetensors, everything else in JSON.

``split_state(state)`` turns an ``Analyzer.state_dict()`` into ``(tensors, skeleton)``: a flat
``{key: tensor}`` dict for ``safetensors.torch.save_file`` and a JSON-serialisable skeleton in
which each tensor is replaced by ``{"__tensor__": key}`` (and each Counter by
``{"__counter__": {...}}``). ``join_state(tensors, skeleton)`` is its inverse.
``save_state`` / ``load_state`` write and read one state as ``<path>.safetensors`` and
``<path>.json`` (atomically).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from attnlens.errors import DataError
from attnlens.io import atomic_open

_TENSOR, _COUNTER = "__tensor__", "__counter__"


def split_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, skeleton)`` of a state dict (see the module docstring)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any, key: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[key] = value.detach().cpu().contiguous()
            return {_TENSOR: key}
        if isinstance(value, Counter):
            return {_COUNTER: {str(k): v for k, v in value.items()}}
        if isinstance(value, dict):
            return {str(k): walk(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{key}.{i}") for i, v in enumerate(value)]
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        return value

    return tensors, walk(state, "state")


def join_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    """Inverse of ``split_state``."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_TENSOR}:
            return tensors[skeleton[_TENSOR]]
        if set(skeleton) == {_COUNTER}:
            return Counter(skeleton[_COUNTER])
        return {k: join_state(tensors, v) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [join_state(tensors, v) for v in skeleton]
    return skeleton


def save_state(state: dict[str, Any], path: str | Path) -> None:
    """Write ``path.safetensors`` and ``path.json`` (each atomically)."""
    from safetensors.torch import save

    tensors, skeleton = split_state(state)
    path = Path(path)
    with atomic_open(path.with_suffix(".safetensors"), "wb") as handle:
        handle.write(save(tensors))
    with atomic_open(path.with_suffix(".json")) as handle:
        json.dump(skeleton, handle, indent=1)


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a state written by ``save_state``."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        skeleton = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        tensors = load_file(path.with_suffix(".safetensors"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the analyzer state {path}: {exc}") from exc
    return join_state(tensors, skeleton)
