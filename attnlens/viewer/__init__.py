"""The interactive attention viewer: ``attnlens view`` and ``attnlens.view(...)``.

Names are imported on first use (``attnlens/lazy.py``): ``viewer.inputs`` (the command's
checks) needs no torch.
"""

from __future__ import annotations

from attnlens.lazy import lazy_names

_LAZY = {
    "AttentionView": "attnlens.viewer.page",
    "viewer_page": "attnlens.viewer.page",
    "ViewData": "attnlens.viewer.data",
    "rollout_overlay": "attnlens.viewer.data",
    "text_attention": "attnlens.viewer.data",
    "pack_matrices": "attnlens.viewer.packing",
    "unpack_matrices": "attnlens.viewer.packing",
    "view": "attnlens.viewer.api",
    "view_page": "attnlens.viewer.api",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
