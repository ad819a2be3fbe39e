from attnlens.model.attention import MultiHeadAttention
from attnlens.model.config import TransformerConfig
from attnlens.model.factored import FactoredMatrix
from attnlens.model.transformer import HookedTransformer, TransformerBlock

__all__ = [
    "FactoredMatrix",
    "HookedTransformer",
    "MultiHeadAttention",
    "TransformerBlock",
    "TransformerConfig",
]
