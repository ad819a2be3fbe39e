"""Map a Hugging Face model's attention from two probe forward passes, without per-model code.

The first pass records every call of the attention function: which module, in which order,
with how many query and key positions and heads. Calls become attention layers: in a
single-stack model the ``k``-th call is layer ``k``; an encoder-decoder model is probed with
an encoder longer than the decoder, so a call is encoder self-attention (queries and keys of
the encoder's length), decoder self-attention (the decoder's length) or cross-attention
(decoder queries, encoder keys), numbered in call order within its type.

The second pass captures what the weight readers are checked against, on batch row 0: the
input of each attention module, the input of each candidate output projection, the input and
output of each norm in the layer, and the layer's own input. From these ``map_layers`` picks,
per layer (``checks``), the ``weights`` layout that reproduces the queries, keys and values
the attention function received, the output projection that received its output, the rotary
embedding that turns the projected queries into the received ones, and the norm in front of
the attention. Whatever cannot be reproduced is recorded with the reason instead of being
guessed.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import nn

from attnlens.backends.hf.checks import read_norm, read_out, read_qkv
from attnlens.backends.hf.layer_map import LayerMap, Rotary
from attnlens.backends.hf.slots import CallRecord, recording
from attnlens.backends.hf.weights import Shapes, out_candidates
from attnlens.errors import ConfigError

__all__ = ["LayerMap", "Rotary", "classify", "is_causal", "map_layers"]


def _block_of(modules: dict[str, nn.Module], name: str) -> tuple[str, nn.Module | None]:
    """The nearest enclosing module that is an item of an nn.ModuleList (the layer)."""
    model = modules[""]
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        parent = modules.get(".".join(parts[: cut - 1])) if cut > 1 else model
        if isinstance(parent, nn.ModuleList):
            prefix = ".".join(parts[:cut])
            return prefix, modules[prefix]
    return "", None


def classify(records: list[CallRecord], encoder_length: int | None) -> list[tuple[str, int]]:
    """(attention type, layer) of each recorded call (module docstring).

    ``encoder_length`` None: a single stack; 0: an encoder-decoder model whose encoder length
    is that of the first call (the encoder runs first).
    """
    if encoder_length == 0 and records:
        encoder_length = records[0].query.shape[0]
    counters: dict[str, int] = defaultdict(int)
    kinds = []
    for call in records:
        q_len, k_len = call.query.shape[0], call.key.shape[0]
        if encoder_length is None:
            if q_len != k_len:
                raise ConfigError(
                    f"{type(call.module).__name__} attends from {q_len} queries to {k_len} keys "
                    "in a single-stack model (pooled or latent attention); attnlens analyses "
                    "square self-attention only."
                )
            kind = "self"
        elif q_len == k_len == encoder_length:
            kind = "encoder"
        elif q_len == k_len:
            kind = "decoder"
        elif k_len == encoder_length:
            kind = "cross"
        else:
            raise ConfigError(
                f"{type(call.module).__name__} attends from {q_len} queries to {k_len} keys, "
                "neither the encoder's nor the decoder's length; attnlens cannot place it."
            )
        kinds.append((kind, counters[kind]))
        counters[kind] += 1
    return kinds


def is_causal(call: CallRecord) -> bool:
    """True when the call's mask forbids every later key (row 0 has no padding)."""
    if call.mask is None or call.mask.shape[0] != call.mask.shape[1] or call.mask.shape[0] < 2:
        return False
    future = torch.ones_like(call.mask, dtype=torch.bool).triu(1)
    return bool((call.mask[future] <= torch.finfo(call.mask.dtype).min / 2).all())


class _Capture:
    """Forward hooks keeping batch row 0 of chosen modules' inputs and outputs, per call."""

    def __init__(self) -> None:
        self.inputs: dict[nn.Module, list[list[torch.Tensor]]] = defaultdict(list)
        self.outputs: dict[nn.Module, list[torch.Tensor]] = defaultdict(list)
        self.handles: list = []

    def watch_inputs(self, module: nn.Module) -> None:
        def hook(mod, args, kwargs):
            tensors = [t for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor)
                       and t.dim() == 3 and t.is_floating_point()]
            self.inputs[mod].append([t[0].detach().clone() for t in tensors])

        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def watch_outputs(self, module: nn.Module) -> None:
        def hook(mod, args, output):
            if isinstance(output, torch.Tensor) and output.dim() == 3:
                self.outputs[mod].append(output[0].detach().clone())

        self.handles.append(module.register_forward_hook(hook))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _kv_input(inputs: list[torch.Tensor], x: torch.Tensor, key_len: int) -> torch.Tensor | None:
    """The attention module's key/value input: its input of the keys' length."""
    if x.shape[0] == key_len:
        return x
    return next((t for t in inputs if t.shape[0] == key_len), None)


def map_layers(model: nn.Module, run, encoder_length: int | None) -> list[LayerMap]:
    """Probe ``model`` with ``run()`` (a forward pass) twice and map its attention layers."""
    with recording() as records:
        run()
    if not records:
        raise ConfigError(
            f"{type(model).__name__} never called the attention interface; its attention "
            "does not go through transformers' ALL_ATTENTION_FUNCTIONS."
        )
    by_name = dict(model.named_modules())
    names = {module: name for name, module in by_name.items()}
    kinds = classify(records, encoder_length)
    modules = list(dict.fromkeys(call.module for call in records))
    capture = _Capture()
    blocks, norms_of = {}, {}
    for module in modules:
        block_name, block = _block_of(by_name, names[module])
        blocks[module] = (block_name, block)
        capture.watch_inputs(module)
        parent = _parent(model, names[module])
        for _, out in out_candidates(module, parent):
            capture.watch_inputs(out)
        if block is not None:
            capture.watch_inputs(block)
            inside = set(module.modules())
            norms = [m for m in block.modules() if m not in inside
                     and "norm" in type(m).__name__.lower()]
            norms_of[module] = norms
            for norm in norms:
                capture.watch_inputs(norm)
                capture.watch_outputs(norm)
    try:
        with recording() as second:
            run()
    finally:
        capture.remove()
    if len(second) != len(records):
        raise ConfigError("the model's attention calls changed between two identical passes.")
    layers = []
    calls_so_far: dict[nn.Module, int] = defaultdict(int)
    block_calls: dict[nn.Module, int] = defaultdict(int)
    for call, (kind, layer) in zip(second, kinds, strict=True):
        module = call.module
        index = calls_so_far[module]
        calls_so_far[module] += 1
        block_name, block = blocks[module]
        shapes = Shapes(call.query.shape[1], call.key.shape[1], call.query.shape[2],
                        call.value.shape[2])
        entry = LayerMap(kind, layer, module, names[module], shapes, is_causal(call), block,
                         block_name, keywords=call.keywords, scaling=call.scaling)
        inputs = capture.inputs[module][index] if index < len(capture.inputs[module]) else []
        x = next((t for t in inputs if t.shape[0] == call.query.shape[0]), None)
        block_input = None
        if block is not None and kind != "cross":
            seen = capture.inputs.get(block, [])
            b_index = block_calls[block]
            block_calls[block] += 1
            if b_index < len(seen) and seen[b_index]:
                block_input = seen[b_index][0]
        if x is None:
            entry.problems["QK"] = entry.problems["OV"] = (
                "the attention module's input was not seen")
        else:
            x_kv = _kv_input(inputs, x, call.key.shape[0])
            entry.d_in = entry.d_out = x.shape[-1]
            entry.d_kv_in = x_kv.shape[-1] if x_kv is not None else x.shape[-1]
            read_qkv(entry, call, x, x_kv, model.config)
            read_out(entry, call, capture, _parent(model, names[module]), index)
            read_norm(entry, x, block_input, capture, norms_of.get(module, []))
        layers.append(entry)
    _cross_norms_follow_the_decoder(layers)
    return layers


def _cross_norms_follow_the_decoder(layers: list[LayerMap]) -> None:
    """A post-norm decoder's cross-attention reads the residual stream itself (the norm whose
    output it matches is the previous sub-layer's, which ends that residual step)."""
    decoder = [e for e in layers if e.attention == "decoder"]
    if decoder and all(e.norm_status == "none" for e in decoder):
        for entry in layers:
            if entry.attention == "cross":
                entry.norm, entry.norm_status = None, "none"
                entry.problems.pop("norm", None)


def _parent(model: nn.Module, name: str) -> nn.Module | None:
    if "." not in name:
        return model if name else None
    return model.get_submodule(name.rsplit(".", 1)[0])

