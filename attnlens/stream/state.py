"""Analyzer states as files: tensors in safetensors, everything else in JSON.

``split_state(state)`` turns an ``Analyzer.state_dict()`` into ``(tensors, skeleton)``: a flat
``{key: tensor}`` dict for ``safetensors.torch.save_file`` and a JSON-serialisable skeleton in
which each tensor is replaced by ``{"__attnlens__": "tensor", "key": key}`` (Counters, tuples,
sets, numpy values and dicts with non-string keys are marked the same way, so they come back
as they were). ``join_state(tensors, skeleton)`` is its inverse; analyzer checkpoints
(``attnlens.runs.checkpointing``) use the same pair.
``save_state`` / ``load_state`` write and read one state as ``<path>.safetensors`` and
``<path>.json`` (atomically).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from attnlens.errors import ConfigError, DataError
from attnlens.runs.io import atomic_open

_MARK = "__attnlens__"  # key of an encoded non-JSON value


class _Codec:
    """Turns a state into JSON-ready values plus a flat dict of tensors, and back (lossless:
    tuples, sets, numpy values, Counters and dicts with non-string keys come back as such)."""

    def __init__(self) -> None:
        self.tensors: dict[str, Any] = {}

    def encode(self, value: Any, where: str) -> Any:
        import numpy as np

        if isinstance(value, torch.Tensor):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = value.detach().to("cpu").contiguous().clone()
            return {_MARK: "tensor", "key": key}
        if isinstance(value, np.ndarray):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = torch.from_numpy(np.ascontiguousarray(value).copy())
            return {_MARK: "ndarray", "key": key}
        if isinstance(value, np.generic):
            return {_MARK: "numpy", "dtype": str(value.dtype), "value": value.item()}
        if isinstance(value, Counter):
            items = [[self.encode(k, where), self.encode(v, where)] for k, v in value.items()]
            return {_MARK: "counter", "items": items}
        if isinstance(value, dict):
            if all(isinstance(k, str) and k != _MARK for k in value):
                return {k: self.encode(v, f"{where}[{k!r}]") for k, v in value.items()}
            items = [[self.encode(k, where), self.encode(v, f"{where}[{k!r}]")]
                     for k, v in value.items()]
            return {_MARK: "dict", "items": items}
        if isinstance(value, tuple):
            return {_MARK: "tuple", "items": [self.encode(v, where) for v in value]}
        if isinstance(value, (set, frozenset)):
            return {_MARK: "set", "items": [self.encode(v, where) for v in value]}
        if isinstance(value, list):
            return [self.encode(v, where) for v in value]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise ConfigError(f"cannot save the state of {where}: a {type(value).__name__} is not "
                          "plain data (tensors, numbers, strings, lists, dicts, Counters).")

    def decode(self, value: Any) -> Any:
        import numpy as np

        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get(_MARK)
        if kind is None:
            return {k: self.decode(v) for k, v in value.items()}
        if kind == "tensor":
            return self.tensors[value["key"]]
        if kind == "ndarray":
            return self.tensors[value["key"]].numpy()
        if kind == "numpy":
            return np.dtype(value["dtype"]).type(value["value"])
        items = value["items"]
        if kind == "counter":
            return Counter({self.decode(k): self.decode(v) for k, v in items})
        if kind == "dict":
            return {self.decode(k): self.decode(v) for k, v in items}
        if kind == "tuple":
            return tuple(self.decode(v) for v in items)
        if kind == "set":
            return {self.decode(v) for v in items}
        raise ConfigError(f"unknown value kind {kind!r} in a checkpoint; it is damaged.")


def split_state(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """``(tensors, skeleton)`` of a state dict (or a list of them): see the module docstring."""
    codec = _Codec()

    def name(one: Any) -> str:
        return str(one.get("analyzer", "state")) if isinstance(one, dict) else "state"

    if isinstance(state, list):
        return codec.tensors, [codec.encode(one, name(one)) for one in state]
    return codec.tensors, codec.encode(state, name(state))


def join_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    """Inverse of ``split_state``."""
    codec = _Codec()
    codec.tensors = tensors
    return codec.decode(skeleton)


def save_state(state: dict[str, Any], path: str | Path) -> None:
    """Write ``path.safetensors`` and ``path.json`` (each atomically)."""
    from safetensors.torch import save

    tensors, skeleton = split_state(state)
    path = Path(path)
    with atomic_open(path.with_suffix(".safetensors"), "wb") as handle:
        handle.write(save(tensors))
    with atomic_open(path.with_suffix(".json")) as handle:
        json.dump(skeleton, handle, indent=1, allow_nan=True)


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
