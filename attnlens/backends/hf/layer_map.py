"""What the hf backend knows of one attention layer of a Hugging Face model."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from attnlens.backends.hf.weights import Shapes, WeightRecipe
from attnlens.model.folding import NormParams


@dataclass
class Rotary:
    """The rotary embedding a layer applies to queries and keys (``status`` says how known)."""

    status: str  # "none", "standard" (attnlens' RoPE reproduces it) or "unknown"
    rotary_dim: int = 0
    base: float = 10000.0


@dataclass
class LayerMap:
    """One attention layer of a Hugging Face model, as attnlens numbers it."""

    attention: str  # "self" (single stack), "encoder", "decoder" or "cross"
    layer: int
    module: nn.Module
    module_name: str
    shapes: Shapes
    causal: bool
    block: nn.Module | None  # the layer module holding the attention (residual hooks)
    block_name: str
    recipe: WeightRecipe | None = None
    rotary: Rotary = field(default_factory=lambda: Rotary("unknown"))
    norm: NormParams | None = None  # the verified input norm (pre-norm layers)
    norm_status: str = "unknown"  # "none" (reads the residual), "pre" (norm), "unknown"
    problems: dict[str, str] = field(default_factory=dict)  # part ("QK", "OV") -> reason
    keywords: tuple[str, ...] = ()
    scaling: float = 0.0
    d_in: int = 0  # width of the queries' input
    d_kv_in: int = 0  # width of the keys' and values' input
    d_out: int = 0  # width of the output projection's output
