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
    "Analyzer": "attnlens.stream.base",
    "Batch": "attnlens.data.batch",
    "run_analyzers": "attnlens.stream.runner",
    "HeadStats": "attnlens.measures.heads.head_stats",
    "PositionalHeads": "attnlens.measures.heads.positional",
    "SyntacticHeads": "attnlens.measures.heads.syntactic",
    "RareWordHeads": "attnlens.measures.heads.rare_words",
    "classify_heads": "attnlens.measures.heads.roles",
    "HeadBehaviour": "attnlens.measures.heads.behaviour",
    "HeadClustering": "attnlens.measures.heads.clustering",
    "Inference": "attnlens.stats.bootstrap",
    "SpectrumAnalyzer": "attnlens.measures.spectrum.spectrum",
    "PatternAsymmetry": "attnlens.measures.asymmetry.pattern_asymmetry",
    "weight_asymmetry_table": "attnlens.measures.asymmetry.weight_asymmetry",
    "shared_subspace_tables": "attnlens.measures.circuits.shared_subspace",
    "circuit_spectra": "attnlens.measures.circuits.circuits",
    "ResidualCollapse": "attnlens.measures.collapse.residual",
    "VariantCollapse": "attnlens.measures.collapse.variant_collapse",
    "PathCollapse": "attnlens.measures.collapse.paths",
    "RolloutAnalyzer": "attnlens.measures.rollout.rollout",
    "rollout_matrices": "attnlens.measures.rollout.rollout",
    "FlowAnalyzer": "attnlens.measures.rollout.flow",
    "attention_flow": "attnlens.measures.rollout.flow",
    "SparseCoverage": "attnlens.measures.sparse.sparse",
    "LinearAttentionView": "attnlens.measures.linear.linear_attention",
    # corpora
    "load_corpus": "attnlens.data.corpus",
    # pruning
    "prune": "attnlens.measures.pruning.pipeline",
    "PruneSettings": "attnlens.measures.pruning.settings",
    "prune_heads": "attnlens.measures.pruning.structural",
    "gradient_importance": "attnlens.measures.pruning.importance",
    "score_heads": "attnlens.measures.pruning.importance",
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
