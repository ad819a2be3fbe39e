"""attnlens: explain what the attention heads of a transformer do.

Layers and heads are numbered from 0 everywhere. Every public name is imported on first use,
so ``import attnlens`` (and the command line's ``--help``) loads neither torch, transformers,
pandas nor matplotlib.
"""

from __future__ import annotations

from attnlens.errors import AttnlensError
from attnlens.lazy import lazy_names

__version__ = "0.1.0"

_LAZY = {
    # model and loading
    "ActivationCache": "attnlens.hooks",
    "HookPoint": "attnlens.hooks",
    "FactoredMatrix": "attnlens.model.factored",
    "HookedTransformer": "attnlens.model.transformer",
    "MultiHeadAttention": "attnlens.model.attention",
    "TransformerConfig": "attnlens.model.config",
    "AttentionModel": "attnlens.model.protocol",
    "HFAttentionModel": "attnlens.backends.hf.model",
    "load": "attnlens.loaders.loading",
    "load_model": "attnlens.loaders.loading",
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
    "weight_asymmetry_table": "attnlens.analysis.weight_asymmetry",
    "shared_subspace_tables": "attnlens.analysis.shared_subspace",
    "circuit_spectra": "attnlens.analysis.circuits",
    "ResidualCollapse": "attnlens.analysis.collapse",
    "VariantCollapse": "attnlens.analysis.variant_collapse",
    "PathCollapse": "attnlens.analysis.paths",
    "RolloutAnalyzer": "attnlens.analysis.rollout",
    "rollout_matrices": "attnlens.analysis.rollout",
    "FlowAnalyzer": "attnlens.analysis.flow",
    "attention_flow": "attnlens.analysis.flow",
    "SparseCoverage": "attnlens.analysis.sparse",
    "LinearAttentionView": "attnlens.analysis.linear_attention",
    # corpora
    "load_corpus": "attnlens.data.corpus",
    # pruning
    "prune": "attnlens.pruning.loop",
    "PruneSettings": "attnlens.pruning.settings",
    "prune_heads": "attnlens.pruning.structural",
    "gradient_importance": "attnlens.pruning.importance",
    "score_heads": "attnlens.pruning.importance",
    # export
    "export_hf": "attnlens.loaders.export",
    # reports and the attention viewer
    "analyze": "attnlens.report.api",
    "compare": "attnlens.report.api",
    "Report": "attnlens.report.folder",
    "view": "attnlens.viewer",
}

__all__ = ["AttnlensError", *_LAZY]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
