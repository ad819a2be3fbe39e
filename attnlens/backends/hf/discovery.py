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
per layer, the ``weights`` layout that reproduces the queries, keys and values the attention
function received, the output projection that received its output, the rotary embedding that
turns the projected queries into the received ones, and the norm in front of the attention.
Whatever cannot be reproduced is recorded with the reason instead of being guessed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn

from attnlens.backends.hf.slots import CallRecord, recording
from attnlens.backends.hf.weights import (
    QKV_LAYOUTS,
    Shapes,
    WeightRecipe,
    out_candidates,
    project,
)
from attnlens.errors import ConfigError
from attnlens.model.attention import apply_rotary, rotary_cos_sin
from attnlens.model.folding import NormParams


@dataclass
class Rotary:
    """The rotary embedding a layer applies to queries and keys (``status`` says how known)."""

    status: str  # "none", "standard" (attnlens' RoPE reproduces it) or "unknown"
    rotary_dim: int = 0
    base: float = 10000.0


@dataclass
class LayerMap:
    """One attention layer of a Hugging Face model, as attnlens numbers it."""

    attention: str  # "self" (single stack), "encoder", "decoder" or "cross"
    layer: int
    module: nn.Module
    module_name: str
    shapes: Shapes
    causal: bool
    block: nn.Module | None  # the layer module holding the attention (residual hooks)
    block_name: str
    recipe: WeightRecipe | None = None
    rotary: Rotary = field(default_factory=lambda: Rotary("unknown"))
    norm: NormParams | None = None  # the verified input norm (pre-norm layers)
    norm_status: str = "unknown"  # "none" (reads the residual), "pre" (norm), "unknown"
    problems: dict[str, str] = field(default_factory=dict)  # part ("QK", "OV") -> reason
    keywords: tuple[str, ...] = ()
    scaling: float = 0.0
    d_in: int = 0  # width of the queries' input
    d_kv_in: int = 0  # width of the keys' and values' input
    d_out: int = 0  # width of the output projection's output


def _tolerance(reference: torch.Tensor) -> float:
    """Recognition, not parity: a few hundred ulps of the tensor's scale."""
    eps = torch.finfo(reference.dtype).eps
    return 256 * eps * max(1.0, float(reference.abs().max()))


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return b.numel() == 0 or float((a.float() - b.float()).abs().max()) <= _tolerance(b)


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


def _norm_candidates(module: nn.Module) -> list[NormParams]:
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return []
    eps = next((float(getattr(module, n)) for n in ("eps", "variance_epsilon", "epsilon")
                if isinstance(getattr(module, n, None), (int, float))), 1e-5)
    bias = getattr(module, "bias", None)
    bias = bias.detach() if isinstance(bias, torch.Tensor) else None
    w = weight.detach()
    return [NormParams("layernorm", w, bias, eps), NormParams("rmsnorm", w, None, eps),
            NormParams("rmsnorm", 1.0 + w, None, eps)]


def _rotary_options(config) -> list[tuple[float | None, float]]:
    """(fraction of d_head or None for absolute dims, base) pairs read from the config."""
    bases, fractions, dims = {10000.0}, {1.0}, set()

    def walk(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, key)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            low = key.lower()
            if ("theta" in low or low.endswith("base") or "base_freq" in low) and value > 1:
                bases.add(float(value))
            if low in ("partial_rotary_factor", "rotary_pct") and 0 < value <= 1:
                fractions.add(float(value))
            if low == "rotary_dim" and value > 0:
                dims.add(int(value))

    walk(config.to_dict())
    options = [(f, b) for f in sorted(fractions) for b in sorted(bases)]
    options += [(-float(d), b) for d in sorted(dims) for b in sorted(bases)]
    return options


def _match_rotary(q_hat: torch.Tensor, q: torch.Tensor, config) -> Rotary | None:
    """Which rotary embedding turns projected ``q_hat [pos, head, d]`` into received ``q``."""
    if close(q_hat, q):
        return Rotary("none")
    d_head = q.shape[-1]
    positions = torch.arange(q.shape[0], device=q.device)[None]  # [1, pos]
    for fraction, base in _rotary_options(config):
        dim = int(-fraction) if fraction < 0 else int(d_head * fraction)
        if dim < 2 or dim % 2 or dim > d_head:
            continue
        cos, sin = rotary_cos_sin(positions, dim, base, q_hat.dtype)
        if close(apply_rotary(q_hat[None], cos, sin)[0], q):
            return Rotary("standard", dim, base)
    # A rotation of feature pairs (i, i + d/2) keeps each pair's norm: the weights are right,
    # the rotary variant (scaled, interleaved, per-layer) is not attnlens' own.
    half = d_head // 2
    for a, b in ((q_hat, q),):
        pair_a = a[..., :half].pow(2) + a[..., half: 2 * half].pow(2)
        pair_b = b[..., :half].pow(2) + b[..., half: 2 * half].pow(2)
        if close(pair_a, pair_b) and close(a[..., 2 * half:], b[..., 2 * half:]):
            return Rotary("unknown")
    inter_a = a[..., 0::2].pow(2) + a[..., 1::2].pow(2)
    inter_b = b[..., 0::2].pow(2) + b[..., 1::2].pow(2)
    if close(inter_a, inter_b):
        return Rotary("unknown")
    return None


def _kv_input(inputs: list[torch.Tensor], x: torch.Tensor, key_len: int) -> torch.Tensor | None:
    """The attention module's key/value input: its input of the keys' length."""
    if x.shape[0] == key_len:
        return x
    return next((t for t in inputs if t.shape[0] == key_len), None)


def _scales(q_hat: torch.Tensor, q: torch.Tensor) -> list[float]:
    """Scales to try between projected and received queries: 1, then the norm ratio (OPT
    multiplies its queries by d_head ** -0.5; YaRN scales cos and sin), snapped to
    d_head ** -0.5 when it is that."""
    norm = float(q_hat.double().norm())
    if norm == 0.0:
        return [1.0]
    ratio = float(q.double().norm()) / norm
    exact = q.shape[-1] ** -0.5
    return [1.0, exact if abs(ratio - exact) <= 1e-4 * exact else ratio]


def _match_scaled(q_hat: torch.Tensor, q: torch.Tensor, config) -> tuple[Rotary | None, float]:
    for scale in _scales(q_hat, q):
        rotary = _match_rotary(q_hat * scale, q, config)
        if rotary is not None:
            return rotary, scale
    return None, 1.0


def _read_qkv(entry: LayerMap, call: CallRecord, x: torch.Tensor, x_kv: torch.Tensor | None,
              config) -> None:
    for layout in QKV_LAYOUTS:
        recipe = WeightRecipe(entry.module, entry.shapes, layout, None)
        try:
            weights = recipe.read()
        except (RuntimeError, ValueError):  # a fused layout whose sizes do not divide
            continue
        if weights.W_Q is None or x_kv is None:
            continue
        if weights.W_V.shape != (entry.shapes.n_kv_heads, x_kv.shape[-1], entry.shapes.d_head_v):
            continue
        if not close(project(x_kv, weights.W_V, weights.b_V), call.value):
            continue
        rotary_q, q_scale = _match_scaled(project(x, weights.W_Q, weights.b_Q), call.query,
                                          config)
        rotary_k, k_scale = _match_scaled(project(x_kv, weights.W_K, weights.b_K), call.key,
                                          config)
        entry.recipe = WeightRecipe(entry.module, entry.shapes, layout, None,
                                    q_scale=q_scale, k_scale=k_scale)
        if rotary_q is None or rotary_k is None:
            entry.problems["QK"] = (
                f"{'queries' if rotary_q is None else 'keys'} are not a linear map of the "
                "attention input (a norm or another step sits between the projection and the "
                "attention, as q_norm/k_norm do)"
            )
            return
        if rotary_q.status == "unknown" or rotary_k.status == "unknown":
            entry.rotary = Rotary("unknown")
        else:
            entry.rotary = rotary_q
        return
    entry.problems["QK"] = entry.problems["OV"] = (
        "no entry of the projection table reproduces this layer's values "
        f"({type(entry.module).__name__}: names not in the table, or another layout)"
    )


def _read_out(entry: LayerMap, call: CallRecord, capture: _Capture, parent: nn.Module | None,
              call_index: int) -> None:
    z = call.z.reshape(call.z.shape[0], -1)  # [pos, head * d_head_v]
    for name, module in out_candidates(entry.module, parent):
        seen = capture.inputs.get(module, [])
        if call_index < len(seen) and seen[call_index] and close(seen[call_index][0], z):
            previous = entry.recipe
            entry.recipe = WeightRecipe(
                entry.module, entry.shapes, previous.qkv if previous else None, module, name,
                previous.q_scale if previous else 1.0, previous.k_scale if previous else 1.0)
            entry.d_out = entry.recipe.read().W_O.shape[-1]
            return
    entry.problems.setdefault("OV", "no output projection in the table receives this layer's "
                                    "attention output")


def _read_norm(entry: LayerMap, x: torch.Tensor, block_input: torch.Tensor | None,
               capture: _Capture, norms: list[nn.Module]) -> None:
    if entry.attention != "cross" and block_input is not None and close(block_input, x):
        entry.norm_status = "none"
        return
    for module in norms:
        outputs, inputs = capture.outputs.get(module, []), capture.inputs.get(module, [])
        for out, ins in zip(outputs, inputs, strict=False):
            if not ins or not close(out, x):
                continue
            if entry.attention != "cross" and block_input is not None and not close(
                    ins[0], block_input):
                continue
            for params in _norm_candidates(module):
                if close(params.apply(ins[0]), x):
                    entry.norm, entry.norm_status = params, "pre"
                    return
    entry.problems.setdefault("norm", "the norm in front of this attention is not a LayerNorm "
                                      "or RMSNorm attnlens can reproduce")


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
            _read_qkv(entry, call, x, x_kv, model.config)
            _read_out(entry, call, capture, _parent(model, names[module]), index)
            _read_norm(entry, x, block_input, capture, norms_of.get(module, []))
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

