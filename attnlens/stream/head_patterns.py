"""The base of every analyzer that reads the heads' attention patterns.

``HeadPatternAnalyzer`` holds what those analyzers used to set up by hand: the head shape
(``n_layers``; ``n_heads``, the widest layer, which is the width of every ``[layer, head]``
tensor; ``heads_per_layer``, each layer's own count, smaller in structurally pruned layers),
the hook names (``hook_kinds`` per layer: ``blocks.3.attn.hook_pattern``, ...) and the
``for_model`` constructor, which reads the shape (and whatever else ``model_options`` names)
from the model and records its fingerprint (``identify_model``) for merges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer


class HeadPatternAnalyzer(Analyzer):
    """An analyzer of the per-head attention patterns ``[batch, head, query_pos, key_pos]``.

    Subclasses call ``set_heads`` in their constructor, list the activations they read per
    layer in ``hook_kinds`` and, where their constructor takes more from the model than its
    head shape (``causal``, ``d_head``, the device...), extend ``model_options``.
    """

    layerwise = True
    hook_kinds: tuple[str, ...] = ("pattern",)

    def set_heads(self, heads_per_layer: Sequence[int] | None = None, n_layers: int = 0,
                  n_heads: int = 0) -> None:
        """The head shape: ``heads_per_layer``, or ``n_layers`` layers of ``n_heads`` heads.

        Sets ``heads_per_layer``, ``n_layers`` and ``n_heads`` (the widest layer unless given).
        """
        heads = [int(n) for n in heads_per_layer] if heads_per_layer else [n_heads] * n_layers
        self.heads_per_layer = heads
        self.n_layers = n_layers or len(heads)
        self.n_heads = n_heads or max(heads, default=0)

    @staticmethod
    def head_shape(model: HookedTransformer) -> dict[str, Any]:
        """``n_layers``, ``n_heads`` (the widest layer) and ``heads_per_layer`` of ``model``."""
        heads = list(model.heads_per_layer)
        return {"n_layers": model.n_layers, "n_heads": max(heads), "heads_per_layer": heads}

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict[str, Any]:
        """The constructor's arguments read from ``model`` (default: its head shape)."""
        return cls.head_shape(model)

    @classmethod
    def for_model(cls, model: HookedTransformer, **options: Any) -> HeadPatternAnalyzer:
        """The analyzer for ``model`` (``options`` win over what is read from the model)."""
        analyzer = cls(**{**cls.model_options(model), **options})
        analyzer.identify_model(model)
        return analyzer

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return [f"blocks.{i}.attn.hook_{kind}" for i in range(model.n_layers)
                for kind in self.hook_kinds]
