"""attnlens: explain what the attention heads of a transformer do.

Layers and heads are numbered from 0 everywhere. Heavy parts (analyzers, pruning, export)
are imported on first use, so ``import attnlens`` stays quick.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnlens.errors import AttnlensError
from attnlens.hooks import ActivationCache, HookPoint
from attnlens.loaders import load, load_model
from attnlens.model import FactoredMatrix, HookedTransformer, MultiHeadAttention, TransformerConfig

__version__ = "0.1.0"

_LAZY = {
    # analyzers (streaming: update / merge / result)
    "Analyzer": "attnlens.analysis.base",
    "Batch": "attnlens.data.batch",
    "run_analyzers": "attnlens.analysis.runner",
    "HeadStats": "attnlens.analysis.head_stats",
    "PositionalHeads": "attnlens.analysis.positional",
    "SyntacticHeads": "attnlens.analysis.syntactic",
    "RareWordHeads": "attnlens.analysis.rare_words",
    "classify_heads": "attnlens.analysis.roles",
    "HeadBehaviour": "attnlens.analysis.behaviour",
    "HeadClustering": "attnlens.analysis.clustering",
    "Inference": "attnlens.analysis.bootstrap",
    "SpectrumAnalyzer": "attnlens.analysis.spectrum",
    "PatternAsymmetry": "attnlens.analysis.asymmetry",
    "weight_asymmetry_table": "attnlens.analysis.asymmetry",
    "shared_subspace_tables": "attnlens.analysis.shared_subspace",
    "circuit_spectra": "attnlens.analysis.circuits",
    "ResidualCollapse": "attnlens.analysis.collapse",
    "VariantCollapse": "attnlens.analysis.collapse",
    "PathCollapse": "attnlens.analysis.paths",
    # corpora
    "load_corpus": "attnlens.data.words",
    # pruning
    "prune": "attnlens.pruning.loop",
    "PruneSettings": "attnlens.pruning.loop",
    "prune_heads": "attnlens.pruning.structural",
    "gradient_importance": "attnlens.pruning.importance",
    "score_heads": "attnlens.pruning.importance",
    # export
    "export_hf": "attnlens.loaders.export",
}

__all__ = [
    "ActivationCache",
    "AttnlensError",
    "FactoredMatrix",
    "HookPoint",
    "HookedTransformer",
    "MultiHeadAttention",
    "TransformerConfig",
    "load",
    "load_model",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnlens' has no attribute {name!r}")
