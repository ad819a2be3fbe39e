"""attnlens: explain what the attention heads of a transformer do."""

from attnlens.errors import AttnlensError
from attnlens.hooks import ActivationCache, HookPoint
from attnlens.loaders import load, load_model
from attnlens.model import FactoredMatrix, HookedTransformer, MultiHeadAttention, TransformerConfig

__version__ = "0.1.0"

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
]
