"""The block variants of the rank-collapse study (Dong et al. 2021), by name.

Needs no torch: the command line checks ``--variants`` before anything heavy is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from attnlens.errors import ConfigError

if TYPE_CHECKING:
    from attnlens.model.config import TransformerConfig

# The block variants of the study: (use_skip, use_mlp, use_norm) switches of TransformerConfig.
# Formulas for post-norm blocks (BERT); pre-norm models keep their own norm placement.
VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "san": (False, False, False),  # pure self-attention: x <- attn(x)
    "san+skip": (True, False, False),  # x <- x + attn(x)
    "san+mlp": (False, True, False),  # x <- mlp(attn(x))
    "san+ln": (False, False, True),  # x <- norm(attn(x))
    "full": (True, True, True),  # the unmodified block
}


def parse_variants(names: str | Sequence[str]) -> list[str]:
    """``"san,full"`` or a list of names -> validated variant names, in the given order."""
    if isinstance(names, str):
        names = [n.strip().lower() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ConfigError(
            f"unknown variant(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(VARIANTS)}."
        )
    return list(dict.fromkeys(names))


def variant_config(cfg: TransformerConfig, variant: str) -> TransformerConfig:
    """``cfg`` with the skip/MLP/norm switches of ``variant`` (other fields unchanged)."""
    use_skip, use_mlp, use_norm = VARIANTS[parse_variants([variant])[0]]
    return replace(
        cfg, use_skip=use_skip, use_mlp=use_mlp, use_norm=use_norm, source=dict(cfg.source)
    )
