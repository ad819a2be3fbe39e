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

Analyzers that read attention patterns row by row set ``reads_blocks = True`` and get each
layer's ``hook_pattern`` as query blocks (``attnlens.stream.blocks.PatternBlock``):
``update_block(batch, layer, block, cache)`` once per block (``cache`` holds the other names
the analyzer reads at that layer, produced before the pattern: ``hook_q``, ``hook_k``,
``hook_v``), then ``end_layer(batch, layer)``. Their ``update_layer`` feeds a whole pattern as
one block, so both paths run the same code. Analyzers that read whole patterns
(``reads_blocks = False``) get them on inputs up to the whole-matrix limit
(``attnlens.model.query_blocks``) and are refused above it, or skip such batches when
``skips_long_inputs`` (``skip_batch``).

Analyzers that need forward passes of their own (the rank-collapse block variants) set
``needs_model_pass`` and implement ``model_pass(model, batch)``; the runner calls it once per
batch after the main forward. No analyzer keeps a reference to the model: what it needs from
the model it takes at construction as plain tensors and numbers.

Running state stays on the device the activations come from (no host synchronisation per
layer or head); ``state_dict`` copies it to the CPU, ``result`` reads it there.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
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
from attnlens.stream.blocks import PatternBlock

__all__ = [
    "Analyzer",
    "Batch",
    "PatternBlock",
    "attention_of",
    "layer_of",
    "model_fingerprint",
    "pattern_hook_names",
]

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
    needs_model_pass: bool = False
    # Reads nothing of the corpus pass (``update`` does nothing), only its own passes
    # (``model_pass``), whose state is the same bits on one thread and in any process:
    # `analyze` may run them in a forked process beside the pass
    # (``report.own_passes_beside``).
    runs_beside: bool = False
    state_fields: tuple[str, ...] = ()
    # State fields that live on the host whatever the model's device (numbers, strings, lists
    # and dicts of those, or CPU tensors of results solved there): ``move_state`` leaves them
    # alone.
    host_fields: tuple[str, ...] = ()
    # On an encoder-decoder model: the attention type this analyzer reads ("encoder",
    # "decoder" or "cross"); it then sees that type as a plain stack (``AttentionView``).
    attention: str | None = None
    # ``model_fingerprint`` of the model the state comes from (``for_model`` constructors set
    # it); part of the settings two partial states must share.
    model_id: str | None = None
    # Reads hook_pattern a block of query rows at a time (update_block / end_layer).
    reads_blocks: bool = False
    # Reads whole patterns, but may leave out inputs above the whole-matrix limit
    # (skip_batch) instead of refusing them.
    skips_long_inputs: bool = False

    @abstractmethod
    def hook_names(self, model: HookedTransformer) -> list[str]:
        """The activations this analyzer reads."""

    # Feeding ------------------------------------------------------------------------
    def begin_batch(self, batch: Batch) -> None:  # noqa: B027 (optional hook)
        """Called before a batch's forward pass (layerwise analyzers)."""

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        """Fold one layer's activations of a batch (layerwise analyzers override this; for
        ``reads_blocks`` analyzers: the layer's pattern as one block)."""
        if self.reads_blocks:
            self._update_layer_as_one_block(batch, layer, cache)
            return
        raise TypeError(f"{type(self).__name__} is not layerwise; call update(batch, cache).")

    def end_batch(self, batch: Batch) -> None:  # noqa: B027 (optional hook)
        """Called after a batch's last layer (layerwise analyzers)."""

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        """Fold one query block of a layer's pattern (``reads_blocks`` analyzers)."""
        raise TypeError(f"{type(self).__name__} does not read query blocks.")

    def end_layer(self, batch: Batch, layer: int) -> None:  # noqa: B027 (optional hook)
        """Called after a layer's last query block (``reads_blocks`` analyzers)."""

    def whole_matrix_length(self, batch: Batch) -> int:
        """The longest input of ``batch`` whose whole attention matrix this analyzer needs
        (0: none): the padded length unless it reads query blocks. The feeder refuses (or
        skips, ``skips_long_inputs``) a batch where this exceeds the whole-matrix limit."""
        return 0 if self.reads_blocks else int(batch.input_ids.shape[-1])

    def skip_batch(self, batch: Batch, limit: int) -> None:  # noqa: B027 (optional hook)
        """A batch left out: longer than the whole-matrix ``limit`` (``skips_long_inputs``)."""

    def _update_layer_as_one_block(self, batch: Batch, layer: int,
                                   cache: ActivationCache) -> None:
        pattern = cache["pattern", layer]  # [batch, head, query_pos, key_pos]
        others = ActivationCache({n: cache[n] for n in cache
                                  if not n.endswith("attn.hook_pattern")})
        self.update_block(batch, layer, PatternBlock.whole(pattern, layer), others)
        self.end_layer(batch, layer)

    def model_pass(self, model: HookedTransformer, batch: Batch) -> None:
        """Forward passes of the analyzer's own (``needs_model_pass``); keep no reference."""
        raise TypeError(f"{type(self).__name__} runs no forward pass of its own.")

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

    def identify_model(self, model: HookedTransformer) -> None:
        """Record which model the state is about (``model_id``), so merges can check it."""
        self.model_id = model_fingerprint(model)

    def all_settings(self) -> dict[str, Any]:
        """``settings()`` plus the model's fingerprint: what a merge compares."""
        return {**self.settings(), "model_id": self.model_id}

    def state_dict(self) -> dict[str, Any]:
        """The running state as plain data on the CPU: ``{"analyzer", "settings", "state"}``."""
        return {
            "analyzer": type(self).__name__,
            "attention": self.attention,
            "settings": self.all_settings(),
            "state": {field: _copy(getattr(self, field), "cpu") for field in self.state_fields},
        }

    def move_state(self, device: torch.device | str) -> None:
        """Move every tensor of the running state to ``device`` (a no-op where it is)."""
        for field in self.state_fields:
            if field in self.host_fields:
                continue
            setattr(self, field, _to_device(getattr(self, field), torch.device(device)))

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
        mine, theirs = _jsonable(self.all_settings()), _jsonable(state.get("settings", {}))
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


def _copy(value: Any, device: str | None = None) -> Any:
    """A deep copy of a state value (tensors detached, on ``device`` when given)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.to(device, copy=True) if device is not None else value.clone()
    if isinstance(value, Counter):
        return Counter(value)
    if isinstance(value, dict):
        return {k: _copy(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v, device) for v in value]
    return value


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, dict) and not isinstance(value, Counter):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, list):
        if not value or not isinstance(value[0], (torch.Tensor, dict, list)):
            return value  # a list of host values (state lists hold one kind of item)
        return [_to_device(v, device) for v in value]
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


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FINGERPRINT_VALUES = 256  # leading values of each parameter that enter the hash


def model_fingerprint(model: HookedTransformer) -> str:
    """A short hash of a model's architecture and weights, to tell two models apart.

    sha256 over the config (provenance left out) and, per parameter, its name, shape, dtype
    and first 256 values: cheap for any size, and different for two checkpoints of one
    architecture (fine-tunes, pruned copies) or one checkpoint in two dtypes. A parameter on
    the meta device (offloaded by ``--device-map auto``: its values live elsewhere) enters with
    its name, shape and dtype only.
    """
    if model in _FINGERPRINTS:
        return _FINGERPRINTS[model]
    digest = hashlib.sha256()
    config = {k: v for k, v in model.cfg.to_dict().items() if k != "source"}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, param in model.named_parameters():
        digest.update(f"{name}{tuple(param.shape)}{param.dtype}".encode())
        if param.device.type == "meta":
            continue
        head = param.detach().flatten()[:_FINGERPRINT_VALUES].float().cpu()
        digest.update(head.numpy().tobytes())
    _FINGERPRINTS[model] = digest.hexdigest()[:16]
    return _FINGERPRINTS[model]
