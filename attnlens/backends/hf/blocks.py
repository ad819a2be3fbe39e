"""The hook modules of the hf backend: one per attention layer and per block, named as attnlens'
own models name theirs (``blocks.L.attn.hook_pattern``, ``blocks.L.hook_resid_post``, ...).

They hold no weights: ``HookAttention`` reads its layer's per-head weights from the Hugging
Face module through the verified ``WeightRecipe`` on each access, and raises
``WeightsUnavailable`` with the reason where the layout could not be verified.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlens.backends.hf.layer_map import LayerMap
from attnlens.errors import AttnlensError
from attnlens.hooks import HookPoint
from attnlens.model.folding import NormParams
from attnlens.model.head_views import PerHeadViews, per_head_count


class WeightsUnavailable(AttnlensError):
    """A per-head weight (or the input norm) of an hf-backed layer could not be read."""


class HookAttention(nn.Module, PerHeadViews):
    """Hook points of one attention layer, and its per-head weights read from the HF module.

    Hook shapes as in ``MultiHeadAttention``: ``hook_q [batch, pos, head, d_head]``,
    ``hook_k``/``hook_v [batch, pos, kv_head, d]`` (unrepeated), ``hook_scores`` and
    ``hook_pattern [batch, head, query_pos, key_pos]``, ``hook_z [batch, query_pos, head,
    d_head_v]`` (before the head gate), ``hook_result [batch, query_pos, head, d_out]``.
    """

    def __init__(self, entry: LayerMap) -> None:
        super().__init__()
        self.entry = entry
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_z, self.hook_result = HookPoint(), HookPoint()
        shapes = entry.shapes
        self.n_heads, self.n_kv_heads = shapes.n_heads, shapes.n_kv_heads
        self.d_head, self.d_head_v = shapes.d_head, shapes.d_head_v
        self.causal = entry.causal
        rotary = entry.rotary
        self.rotary_dim = rotary.rotary_dim if rotary.status == "standard" else 0
        self.rotary_base = rotary.base
        self.rotary_scaling = None  # "standard" is unscaled RoPE (checks._match_rotary)

    def points(self) -> dict[str, HookPoint]:
        return {"q": self.hook_q, "k": self.hook_k, "v": self.hook_v,
                "scores": self.hook_scores, "pattern": self.hook_pattern, "z": self.hook_z}

    # Per-head weights ----------------------------------------------------------------------
    def problem(self, part: str) -> str | None:
        """Why ``part`` ("QK", "OV", "norm", "rotary") cannot be read, or None."""
        if part == "rotary" and "QK" not in self.entry.problems and (
                self.entry.rotary.status == "unknown"):
            return "the rotary embedding is not attnlens' own (scaled, interleaved or per-layer)"
        return self.entry.problems.get(part)

    def _weights(self, part: str):
        reason = self.entry.problems.get(part)
        if reason is not None or self.entry.recipe is None:
            raise WeightsUnavailable(
                f"the {part} weights of {self.entry.module_name} cannot be read: "
                f"{reason or 'no verified layout'}."
            )
        return self.entry.recipe.read()

    @property
    def W_Q(self) -> torch.Tensor:
        return self._weights("QK").W_Q

    @property
    def W_K(self) -> torch.Tensor:
        return self._weights("QK").W_K

    @property
    def b_Q(self) -> torch.Tensor | None:
        return self._weights("QK").b_Q

    @property
    def b_K(self) -> torch.Tensor | None:
        return self._weights("QK").b_K

    @property
    def W_V(self) -> torch.Tensor:
        return self._weights("OV").W_V

    @property
    def b_V(self) -> torch.Tensor | None:
        return self._weights("OV").b_V

    @property
    def W_O(self) -> torch.Tensor:
        weights = self._weights("OV")
        if weights.W_O is None:
            raise WeightsUnavailable(f"the output projection of {self.entry.module_name} "
                                     "was not found.")
        return weights.W_O

    @property
    def b_O(self) -> torch.Tensor | None:
        return self._weights("OV").b_O

    def head_parameter_count(self) -> float:
        """Parameters per query head (``PerHeadViews``), counted from the projections the
        layout found even where a norm keeps them from being this layer's bilinear form."""
        recipe = self.entry.recipe
        if recipe is None:
            raise WeightsUnavailable(f"the projections of {self.entry.module_name} were not "
                                     "found; its heads' parameters cannot be counted.")
        return per_head_count(recipe.read(), self.group_size)

    @property
    def d_in(self) -> int:
        return self.entry.d_in

    @property
    def d_kv_in(self) -> int:
        return self.entry.d_kv_in

    @property
    def d_out(self) -> int:
        return self.entry.d_out

    @property
    def scale(self) -> float:
        return self.entry.scaling

    def extra_repr(self) -> str:
        return (f"{self.entry.module_name}: n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
                f"d_head={self.d_head}, causal={self.causal}")


class HookBlock(nn.Module):
    """Residual hook points of one layer, its attention's hooks and its input norm."""

    def __init__(self, entry: LayerMap, cross: LayerMap | None = None) -> None:
        super().__init__()
        self.attn = HookAttention(entry)
        self.cross_attn = HookAttention(cross) if cross is not None else None
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model], the layer's input
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model], after the output projection
        if cross is not None:
            self.hook_cross_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model], the layer's output

    @staticmethod
    def _norm(entry: LayerMap) -> NormParams | None:
        if entry.norm_status == "unknown":
            raise WeightsUnavailable(
                f"the norm in front of {entry.module_name} is not one attnlens can reproduce."
            )
        return entry.norm

    @property
    def ln1(self) -> NormParams | None:
        """The verified norm in front of the attention (None: it reads the residual stream)."""
        return self._norm(self.attn.entry)

    @property
    def ln_cross(self) -> NormParams | None:
        return None if self.cross_attn is None else self._norm(self.cross_attn.entry)
