"""Head importance, pruning curves on a real metric, and structural head removal."""

from attnlens.pruning.importance import ORDERS, gradient_importance, score_heads
from attnlens.pruning.loop import PruneResult, PruneSettings, final_mask, prune
from attnlens.pruning.structural import prune_heads, pruned_parameter_count

__all__ = [
    "ORDERS",
    "PruneResult",
    "PruneSettings",
    "final_mask",
    "gradient_importance",
    "prune",
    "prune_heads",
    "pruned_parameter_count",
    "score_heads",
]
