"""Checks that pick, per attention layer, what reproduces what the attention function saw.

On batch row 0 of the probe pass (``discovery``): the entry of the projection table whose
weights give the values the function received, and the queries and keys up to attnlens' own
rotary embedding or a scalar (``read_qkv``); the output projection that received its output
(``read_out``); the LayerNorm or RMSNorm that turns the layer's input into the attention's
(``read_norm``). What cannot be reproduced is recorded as a problem with its reason.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlens.backends.hf.layer_map import LayerMap, Rotary
from attnlens.backends.hf.slots import CallRecord
from attnlens.backends.hf.weights import QKV_LAYOUTS, WeightRecipe, out_candidates, project
from attnlens.model.attention import apply_rotary, rotary_cos_sin
from attnlens.model.folding import NormParams


def _tolerance(reference: torch.Tensor) -> float:
    """Recognition, not parity: a few hundred ulps of the tensor's scale."""
    eps = torch.finfo(reference.dtype).eps
    return 256 * eps * max(1.0, float(reference.abs().max()))


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return b.numel() == 0 or float((a.float() - b.float()).abs().max()) <= _tolerance(b)


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


def scaled_rope_types(config) -> set[str]:
    """The rope types other than "default" a config declares (``rope_parameters``, a legacy
    ``rope_scaling``, or one dict per layer type), e.g. {"llama3"}."""
    found = set()
    fields = config.to_dict()
    for key in ("rope_parameters", "rope_scaling"):
        value = fields.get(key)
        if not isinstance(value, dict):
            continue
        for p in (value, *(v for v in value.values() if isinstance(v, dict))):
            kind = p.get("rope_type", p.get("type"))
            if isinstance(kind, str) and kind != "default":
                found.add(kind)
    return found


def _match_rotary(q_hat: torch.Tensor, q: torch.Tensor, config) -> Rotary | None:
    """Which rotary embedding turns projected ``q_hat [pos, head, d]`` into received ``q``.

    "standard" only for an unscaled rotary embedding: a scaled one (``scaled_rope_types``) may
    equal it on the probe's few positions (dynamic NTK below its trained length) and not on
    longer inputs, so it stays "unknown" (the measures per relative offset are left out).
    """
    if close(q_hat, q):
        return Rotary("none")
    d_head = q.shape[-1]
    positions = torch.arange(q.shape[0], device=q.device)[None]  # [1, pos]
    options = [] if scaled_rope_types(config) else _rotary_options(config)
    for fraction, base in options:
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


def read_qkv(entry: LayerMap, call: CallRecord, x: torch.Tensor, x_kv: torch.Tensor | None,
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


def read_out(entry: LayerMap, call: CallRecord, capture, parent: nn.Module | None,
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


def read_norm(entry: LayerMap, x: torch.Tensor, block_input: torch.Tensor | None,
               capture, norms: list[nn.Module]) -> None:
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
