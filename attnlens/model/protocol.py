"""``AttentionModel``: what analyzers, pruning, reports and the CLI may ask of a model.

Three classes implement it: ``HookedTransformer`` (a single stack), ``EncoderDecoderTransformer``
and the hf backend's ``HFAttentionModel``. Code that needs to know how a model is built asks
it through this interface (its attention layers and their types, its hook names, which
per-head weights it can give) instead of testing its class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from attnlens.hooks import ActivationCache, HookPoint
from attnlens.model.config import TransformerConfig

AttentionKind = Literal["self", "cross"]
# Parts of a model an analysis may need, and what each is.
PARTS = {
    "QK": "per-head W_Q, W_K (query/key circuits, weight asymmetry, shared subspaces)",
    "OV": "per-head W_V, W_O (value/output circuits)",
    "norm": "the norm in front of each attention (folded into the weights of pre-norm models)",
    "rotary": "attnlens' own rotary embedding (query/key measures per relative offset)",
    "blocks": "attnlens' own blocks (rank-collapse block variants, structural pruning, export)",
}


@dataclass(frozen=True)
class AttentionLayer:
    """One gated attention layer: its type, its layer in its stack and its module.

    ``attention``: "self" (single stack), "encoder", "decoder" or "cross"; ``attn`` has
    ``n_heads``, ``n_kv_heads`` and the per-head weights; ``hook_prefix`` e.g.
    ``decoder.blocks.2.cross_attn.``.
    """

    attention: str
    layer: int
    attn: Any
    hook_prefix: str

    @property
    def kind(self) -> AttentionKind:
        return "cross" if self.attention == "cross" else "self"

    def label(self) -> str:
        return f"{self.attention}.{self.layer}"


@runtime_checkable
class AttentionModel(Protocol):
    """The model interface (module docstring). Layers and heads are numbered from 0.

    ``attention_layers`` lists every attention layer as a gate row (``AttentionLayer``:
    ``attention`` "self" for a single stack, else "encoder", "decoder" or "cross"; ``layer``;
    ``attn`` with ``n_heads``, ``n_kv_heads``, per-head ``W_Q`` ... ``W_O``; ``hook_prefix``).
    ``head_mask [row, head]`` in ``forward`` gates heads in that order. ``cfg`` summarises the
    architecture (``d_model``, ``causal``, ``norm_position``, ``source`` with the checkpoint's
    path, name and ``backend``). ``weight_problems()`` names the ``PARTS`` the model cannot
    give, with the reason; analyses needing them are left out, and the report says why.
    ``token_maps()`` gives the token embedding, unembedding and final norm gain
    (``attnlens.model.token_maps.TokenMaps``) or raises ``TokenMapsUnavailable`` with the
    reason.
    """

    backend: str
    cfg: TransformerConfig
    tokenizer: Any
    hook_dict: dict[str, HookPoint]

    @property
    def attention_layers(self) -> list: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def heads_per_layer(self) -> list[int]: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def weight_problems(self) -> dict[str, str]: ...

    def token_maps(self) -> Any: ...

    def hooks(self, fwd_hooks: Iterable = (), bwd_hooks: Iterable = ()
              ) -> AbstractContextManager: ...

    def run_with_hooks(self, *args: Any, fwd_hooks: Iterable = (), bwd_hooks: Iterable = (),
                       **kwargs: Any) -> Any: ...

    def run_with_cache(self, *args: Any, names_filter: str | list | Callable | None = None,
                       **kwargs: Any) -> tuple[Any, ActivationCache]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def attention_types(model: AttentionModel) -> tuple[str, ...]:
    """The attention types of a model in gate-row order: ("self",) for a single stack."""
    return tuple(dict.fromkeys(row.attention for row in model.attention_layers))


def has_several_attention_types(model: AttentionModel) -> bool:
    """True for encoder-decoder models (encoder, decoder and cross-attention layers)."""
    return attention_types(model) != ("self",)


def gate_hook_names(model: AttentionModel) -> list[str]:
    """The ``hook_z`` of each gate row (per-example gates scale heads there)."""
    return [row.hook_prefix + "hook_z" for row in model.attention_layers]


def missing_parts(model: AttentionModel, parts: Iterable[str]) -> dict[str, str]:
    """Of ``parts`` (keys of ``PARTS``), those ``model`` cannot give, with the reason."""
    problems = model.weight_problems()
    return {part: problems[part] for part in parts if part in problems}


def left_out_note(what: str, missing: dict[str, str]) -> str:
    """One sentence saying that ``what`` was left out, and why."""
    reasons = "; ".join(f"{part}: {reason}" for part, reason in missing.items())
    return f"Left out: {what}, which needs what this model cannot give ({reasons})."
