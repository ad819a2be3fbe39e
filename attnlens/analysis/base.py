"""The streaming analyzer protocol.

An analyzer names the activations it reads (``hook_names``), folds each batch into a small
state, combines two partial states (``merge``, so a corpus can be split across processes),
ships its state as plain data (``state_dict`` / ``load_state_dict``, so a run can be
checkpointed and resumed) and returns tidy DataFrames (``result``).

Two ways to receive a batch:

- **layerwise** analyzers (``layerwise = True``) get ``begin_batch(batch)``, then
  ``update_layer(batch, layer, cache)`` once per layer as soon as the forward pass has
  produced that layer's activations (``cache`` holds that layer's names only; names outside
  ``blocks.N`` come as layer -1), then ``end_batch(batch)``. The runner frees a layer's
  activations right after, so memory does not grow with depth.
- whole-batch analyzers override ``update(batch, cache)`` and get every layer at once.

``update(batch, cache)`` works for both kinds (for a layerwise analyzer it replays a full
cache layer by layer), which is what tests on hand-built caches use.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pandas as pd
import torch

from attnlens.data.batch import Batch  # lives with the corpora; re-exported for analyzers
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

__all__ = ["Analyzer", "Batch", "attention_of", "layer_of", "pattern_hook_names"]

_BLOCK_RE = re.compile(r"(?:^|\.)blocks\.(\d+)\.")


def layer_of(name: str) -> int:
    """The block index in a hook name (``blocks.3.attn.hook_pattern`` -> 3), else -1."""
    match = _BLOCK_RE.search(name)
    return int(match.group(1)) if match else -1


def attention_of(name: str) -> str | None:
    """The attention type of an encoder-decoder hook name, else None.

    ``encoder.blocks.2.attn.hook_pattern`` -> "encoder", ``decoder.blocks.2.attn...`` ->
    "decoder", ``decoder.blocks.2.cross_attn...`` (and ``hook_cross_attn_out``) -> "cross".
    """
    if name.startswith("encoder."):
        return "encoder"
    if name.startswith("decoder."):
        return "cross" if ".cross_attn." in name or name.endswith("cross_attn_out") else "decoder"
    return None


def group_by_layer(names: Iterable[str]) -> dict[int, list[str]]:
    """Hook names grouped by ``layer_of``, layers in increasing order."""
    groups: dict[int, list[str]] = {}
    for name in names:
        groups.setdefault(layer_of(name), []).append(name)
    return dict(sorted(groups.items()))


class Analyzer(ABC):
    """A streaming analysis of activations (see the module docstring).

    State: subclasses list the attributes that make up their running state in
    ``state_fields`` (tensors, numbers, strings, lists, Counters or dicts of those; never a
    model, a closure or a file handle) and their options in ``settings()``. The base class
    then provides ``state_dict``, ``load_state_dict`` and a strict ``merge`` that refuses a
    state made by another analyzer class or with other settings, and adds the fields
    (tensors and numbers are summed, lists concatenated, Counters and dicts merged by key).
    Override ``_merge_field`` where summing is not the right combination.
    """

    name: str = "analyzer"
    layerwise: bool = False
    state_fields: tuple[str, ...] = ()
    # On an encoder-decoder model: the attention type this analyzer reads ("encoder",
    # "decoder" or "cross"); it then sees that type as a plain stack (``AttentionView``).
    attention: str | None = None

    @abstractmethod
    def hook_names(self, model: HookedTransformer) -> list[str]:
        """The activations this analyzer reads."""

    # Feeding ------------------------------------------------------------------------
    def begin_batch(self, batch: Batch) -> None:  # noqa: B027 (optional hook)
        """Called before a batch's forward pass (layerwise analyzers)."""

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        """Fold one layer's activations of a batch (layerwise analyzers override this)."""
        raise TypeError(f"{type(self).__name__} is not layerwise; call update(batch, cache).")

    def end_batch(self, batch: Batch) -> None:  # noqa: B027 (optional hook)
        """Called after a batch's last layer (layerwise analyzers)."""

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        """Fold one batch given every activation it reads (all layers at once)."""
        if not self.layerwise:
            raise TypeError(f"{type(self).__name__} must override update() or set layerwise.")
        self.begin_batch(batch)
        for layer, names in group_by_layer(cache).items():
            self.update_layer(batch, layer, ActivationCache({n: cache[n] for n in names}))
        self.end_batch(batch)

    @abstractmethod
    def result(self) -> dict[str, pd.DataFrame]:
        """Tables by name (each tidy: one row per layer/head/measure)."""

    # State ----------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """JSON-serialisable options and model facts two partial states must share."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The running state as plain data: ``{"analyzer", "settings", "state"}``."""
        return {
            "analyzer": type(self).__name__,
            "attention": self.attention,
            "settings": self.settings(),
            "state": {field: _copy(getattr(self, field)) for field in self.state_fields},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the running state by ``state`` (made by ``state_dict`` with equal settings)."""
        self._check_compatible(state)
        missing = set(self.state_fields) - set(state["state"])
        if missing:
            raise ConfigError(f"{self.name} state lacks {sorted(missing)}; it is incomplete.")
        for field in self.state_fields:
            setattr(self, field, _copy(state["state"][field]))

    def merge(self, other: Analyzer) -> Analyzer:
        """Add another analyzer's partial state into this one; return self."""
        theirs = other.state_dict()
        self._check_compatible(theirs)
        for field in self.state_fields:
            merged = self._merge_field(field, getattr(self, field), theirs["state"][field])
            setattr(self, field, merged)
        return self

    def _merge_field(self, field: str, mine: Any, theirs: Any) -> Any:
        return _add(mine, theirs, f"{self.name}.{field}")

    def _check_compatible(self, state: dict[str, Any]) -> None:
        kind = type(self).__name__
        if state.get("analyzer") != kind:
            raise ConfigError(
                f"cannot combine a {state.get('analyzer')} state with a {kind} analyzer."
            )
        if state.get("attention") != self.attention:
            raise ConfigError(
                f"cannot combine {self.name} states of different attention types "
                f"({state.get('attention')} and {self.attention})."
            )
        mine, theirs = _jsonable(self.settings()), _jsonable(state.get("settings", {}))
        if mine != theirs:
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise ConfigError(
                f"cannot combine {self.name} states made with other settings ({', '.join(diff)} "
                "differ); rerun with the same model and options."
            )


def _jsonable(value: Any) -> Any:
    """Settings normalised for comparison (tuples -> lists, sets -> sorted lists)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Counter):
        return Counter(value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _add(mine: Any, theirs: Any, where: str) -> Any:
    """Combine two partial values of one state field."""
    if isinstance(mine, torch.Tensor):
        if mine.shape != theirs.shape:
            raise ConfigError(f"cannot merge {where}: shapes {tuple(mine.shape)} and "
                              f"{tuple(theirs.shape)} differ.")
        return mine + theirs.to(mine.device, mine.dtype)
    if isinstance(mine, Counter):
        return Counter(mine) + Counter(theirs)
    if isinstance(mine, dict):
        merged = {k: _copy(v) for k, v in mine.items()}
        for key, value in theirs.items():
            merged[key] = (
                _add(merged[key], value, f"{where}[{key!r}]") if key in merged else _copy(value)
            )
        return merged
    if isinstance(mine, list):
        return [*mine, *_copy(theirs)]
    if isinstance(mine, (int, float)) and not isinstance(mine, bool):
        return mine + theirs
    if mine == theirs:
        return mine
    raise ConfigError(f"cannot merge {where}: values {mine!r} and {theirs!r} differ.")


def pattern_hook_names(model: HookedTransformer) -> list[str]:
    return [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
