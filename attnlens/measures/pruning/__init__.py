"""Head importance, pruning curves on a real metric, and structural head removal.

Names are imported on first use: ``attnlens.measures.pruning.settings`` (option checks)
needs no torch.
"""

from __future__ import annotations

from attnlens.lazy import lazy_names

_LAZY = {
    "ORDERS": "attnlens.measures.pruning.settings",
    "PruneSettings": "attnlens.measures.pruning.settings",
    "PruneResult": "attnlens.measures.pruning.loop",
    "final_mask": "attnlens.measures.pruning.loop",
    "prune": "attnlens.measures.pruning.pipeline",
    "gradient_importance": "attnlens.measures.pruning.importance",
    "score_heads": "attnlens.measures.pruning.importance",
    "prune_heads": "attnlens.measures.pruning.structural",
    "pruned_parameter_count": "attnlens.measures.pruning.structural",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
