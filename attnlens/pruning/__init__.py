"""Head importance, pruning curves on a real metric, and structural head removal.

Names are imported on first use: ``attnlens.pruning.settings`` (option checks) needs no torch.
"""

from __future__ import annotations

from attnlens.lazy import lazy_names

_LAZY = {
    "ORDERS": "attnlens.pruning.settings",
    "PruneSettings": "attnlens.pruning.settings",
    "PruneResult": "attnlens.pruning.loop",
    "final_mask": "attnlens.pruning.loop",
    "prune": "attnlens.pruning.loop",
    "gradient_importance": "attnlens.pruning.importance",
    "score_heads": "attnlens.pruning.importance",
    "prune_heads": "attnlens.pruning.structural",
    "pruned_parameter_count": "attnlens.pruning.structural",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
