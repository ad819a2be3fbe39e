"""Checkpoints whose config.json records removed heads (``pruned_heads``) load pruned.

``attnlens prune --export`` writes a structurally pruned model as a full-size checkpoint (each
kept head in its original place, zero weights for the removed ones: what transformers loads)
and records the removed heads in Hugging Face's historical field ``pruned_heads``
(``{"1": [3, 7]}``: layer 1 lost heads 3 and 7). Loading such a checkpoint removes those heads
again, so the model attnlens analyses has the kept heads only, each with its original number
(``model.head_ids``). A listed head whose weights are not zero would change the outputs once
removed: it is refused, since transformers would compute with it.
"""

from __future__ import annotations

import torch

from attnlens.errors import ConfigError, ModelLoadError
from attnlens.loaders.checkpoint import config_shape
from attnlens.model.structural import prune_heads
from attnlens.model.transformer import HookedTransformer

FIX = "fix or remove \"pruned_heads\" in config.json"


def _parse(field: object, n_layers: int, n_heads: int, where: str) -> dict[int, list[int]]:
    """``{layer: [heads]}`` from config.json's ``pruned_heads`` (checked)."""
    if not isinstance(field, dict):
        raise ModelLoadError(f"{where} \"pruned_heads\" is a {type(field).__name__}, not an "
                             f"object of layer -> list of head numbers; {FIX}.")
    removed: dict[int, list[int]] = {}
    for key, heads in field.items():
        try:
            layer = int(key)
        except (TypeError, ValueError):
            layer = -1
        if not 0 <= layer < n_layers or str(layer) != str(key).strip():
            raise ModelLoadError(f"{where} \"pruned_heads\" names layer {key!r}; the model has "
                                 f"layers 0 to {n_layers - 1}; {FIX}.")
        if not isinstance(heads, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h < n_heads for h in heads
        ):
            raise ModelLoadError(f"{where} \"pruned_heads\" for layer {layer} must list head "
                                 f"numbers 0 to {n_heads - 1}, not {heads!r}; {FIX}.")
        if len(set(heads)) == n_heads:
            raise ModelLoadError(f"{where} \"pruned_heads\" removes every head of layer "
                                 f"{layer}; a layer keeps at least one; {FIX}.")
        if heads:
            removed[layer] = sorted(set(heads))
    return removed


def check_pruned_heads(hf: dict, where: str) -> None:
    """Refuse a malformed ``pruned_heads`` before any weight is read (config.json alone)."""
    shape = config_shape(hf)
    if hf.get("pruned_heads") and shape is not None:
        _parse(hf["pruned_heads"], *shape, where)


def _contributes(model: HookedTransformer, layer: int, head: int) -> bool:
    """Whether the head adds anything to the output (non-zero ``W_O`` and value weights)."""
    attn = model.blocks[layer].attn
    if attn.W_O is not None and not bool(attn.W_O[head].any()):
        return False
    kv = head // attn.group_size
    value = attn.W_V[kv].any() or (attn.b_V is not None and attn.b_V[kv].any())
    return bool(value)


def apply_pruned_heads(model: HookedTransformer, hf: dict, where: str) -> HookedTransformer:
    """``model`` without the heads ``hf["pruned_heads"]`` lists (``model`` if none)."""
    field = hf.get("pruned_heads")
    if not field:
        return model
    removed = _parse(field, model.n_layers, model.cfg.n_heads, where)
    if not removed:
        return model
    if any(n != model.cfg.n_heads for n in model.heads_per_layer):
        raise ModelLoadError(f"{where} lists \"pruned_heads\" but its weights are already "
                             "smaller than the config's head count (transformers 4's compact "
                             "format); re-export the model with attnlens prune --export, or "
                             f"{FIX}.")
    for layer, heads in removed.items():
        live = [h for h in heads if _contributes(model, layer, h)]
        if live:
            raise ModelLoadError(
                f"{where} \"pruned_heads\" lists head L{layer}H{live[0]}, whose weights are not "
                "zero: transformers computes with it, so removing it would change the model; "
                f"{FIX}."
            )
    mask = torch.ones(model.n_layers, model.cfg.n_heads)
    for layer, heads in removed.items():
        mask[layer, heads] = 0.0
    try:
        return prune_heads(model, mask)
    except ConfigError as exc:  # a grouped-query layer losing part of a group
        raise ModelLoadError(f"{where} \"pruned_heads\" cannot be applied: {exc}") from exc


def refuse_pruned_heads_on_hf(hf: dict, where: str) -> None:
    """The hf backend runs transformers' model, which ignores ``pruned_heads`` and computes
    with the export's zero heads: such a checkpoint is refused there (the native backend,
    which ``auto`` takes, loads it pruned with its head numbers)."""
    check_pruned_heads(hf, where)
    field = hf.get("pruned_heads")
    if isinstance(field, dict) and any(field.values()):
        raise ModelLoadError(
            f"{where} records removed heads (\"pruned_heads\"); the hf backend runs "
            "transformers' full-size model, which ignores them and would report the removed "
            "heads as heads: load it with --backend native (or auto)."
        )
