"""The hf backend: Hugging Face models run through transformers' attention interface.

``attention`` (the registered function), ``conventions`` (each model's eager precision),
``slots`` (which layer a call is), ``discovery`` (mapping a model by probing it), ``checks``
(what reproduces each layer), ``layer_map`` (what is known of a layer), ``weights`` (per-head
weights by naming convention), ``row_mask`` (transformers' eager mask built by query rows on
long inputs), ``blocks``, ``wiring`` and ``model`` (the hooked wrapper),
``loading`` (checkpoints). Names are imported on first use: importing the package loads
neither torch nor transformers.
"""

from __future__ import annotations

from attnlens.lazy import lazy_names

_LAZY = {
    "HFAttentionModel": "attnlens.backends.hf.model",
    "attnlens_attention": "attnlens.backends.hf.attention",
    "register": "attnlens.backends.hf.attention",
    "UnsupportedKeywordError": "attnlens.backends.hf.attention",
    "WeightsUnavailable": "attnlens.backends.hf.blocks",
    "load_hf_model": "attnlens.backends.hf.loading",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
