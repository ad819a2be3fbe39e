"""Head importance, pruning curves on a real metric, and structural head removal.

Names are imported on first use: ``attnlens.pruning.settings`` (option checks) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnlens.pruning' has no attribute {name!r}")
