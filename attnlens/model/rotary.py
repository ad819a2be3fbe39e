"""Rotary frequencies (RoPE) and their scaling variants, as transformers computes them.

``inverse_frequencies`` returns the ``rotary_dim / 2`` angular frequencies ``theta_i`` of a
rotary embedding (position ``p`` rotates feature pair ``i`` by ``p * theta_i``), plain or
scaled by a ``RopeScaling`` (``linear``, ``dynamic``, ``yarn``, ``llama3``), with the same
operations in the same order as transformers' ``modeling_rope_utils`` (float32 by default),
so that a converted model's cos/sin tables equal Hugging Face's bit for bit.
``attention_factor`` is YaRN's multiplier of cos and sin (1 otherwise).

The model's attention (``attention.rotary_cos_sin``) and the weight-based measures that
rotate ``W_Q R(delta) W_K^T`` (``weight_asymmetry.rotary_tables``) both read these.
"""

from __future__ import annotations

import math

import torch

from attnlens.errors import ConfigError
from attnlens.model.config import RopeScaling


def plain_inverse_frequencies(
    rotary_dim: int, base: float | torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``1 / base ** (2i / rotary_dim)`` for ``i < rotary_dim / 2``: ``[rotary_dim / 2]``."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=dtype) / rotary_dim
    return 1.0 / (base**exponents)


def _dynamic_base(rotary_dim: int, base: float, scaling: RopeScaling, seq_len: int):
    """Dynamic NTK's base for a forward of ``seq_len`` positions (a float32 tensor, as HF)."""
    factor, reference = scaling.factor, scaling.original_max_positions
    length = torch.tensor(seq_len, dtype=torch.int64)
    return base * ((factor * length / reference) - (factor - 1)) ** (
        rotary_dim / (rotary_dim - 2)
    )


def _llama3(inv_freq: torch.Tensor, scaling: RopeScaling) -> torch.Tensor:
    factor, low, high = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
    context = scaling.original_max_positions
    low_freq_wavelen, high_freq_wavelen = context / low, context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(rotary_dim: int, base: float, scaling: RopeScaling, dtype: torch.dtype):
    factor, context = scaling.factor, scaling.original_max_positions

    def correction_dim(rotations: float) -> float:
        # The dimension whose wavelength turns ``rotations`` times over the context.
        return (rotary_dim * math.log(context / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    pos_freqs = base ** (torch.arange(0, rotary_dim, 2).to(dtype) / rotary_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=dtype) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # share of the extrapolated (unscaled) frequency, per pair
    return interpolation * (1 - keep) + extrapolation * keep


def inverse_frequencies(
    rotary_dim: int,
    base: float,
    scaling: RopeScaling | None = None,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The rotary frequencies ``[rotary_dim / 2]`` (see the module docstring).

    ``seq_len``: the number of positions of the forward (largest position + 1), which only
    ``dynamic`` scaling reads; None counts as short (the plain frequencies).
    """
    if scaling is None:
        return plain_inverse_frequencies(rotary_dim, base, dtype)
    kind = scaling.rope_type
    if kind == "linear":
        return plain_inverse_frequencies(rotary_dim, base, dtype) / scaling.factor
    if kind == "dynamic":
        if seq_len is None or seq_len <= scaling.original_max_positions:
            return plain_inverse_frequencies(rotary_dim, base, dtype)
        dynamic = _dynamic_base(rotary_dim, base, scaling, seq_len).to(dtype)
        return plain_inverse_frequencies(rotary_dim, dynamic, dtype)
    if kind == "llama3":
        return _llama3(plain_inverse_frequencies(rotary_dim, base, dtype), scaling)
    if kind == "yarn":
        return _yarn(rotary_dim, base, scaling, dtype)
    raise ConfigError(
        f"unknown rope type {kind!r}; attnlens implements linear, dynamic, yarn and llama3."
    )


def attention_factor(scaling: RopeScaling | None) -> float:
    """The multiplier of cos and sin (YaRN's attention factor; 1 for the other variants)."""
    return 1.0 if scaling is None else scaling.attention_factor
