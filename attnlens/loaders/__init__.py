"""Load Hugging Face checkpoints into attnlens' HookedTransformer (and export them back).

Names are imported on first use, so importing a loader submodule (for example
``attnlens.loaders.checkpoint`` to check a path) does not load torch or transformers.
"""

from __future__ import annotations

from attnlens.lazy import lazy_names

_LAZY = {
    "load": "attnlens.loaders.loading",
    "load_model": "attnlens.loaders.loading",
    "CONVERTERS": "attnlens.loaders.registry",
    "supported_architectures": "attnlens.loaders.registry",
    "export_hf": "attnlens.loaders.export",
    "pad_heads_to_uniform": "attnlens.loaders.export",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
