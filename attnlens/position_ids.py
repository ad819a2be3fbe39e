"""How many positions a checkpoint's position table leaves for tokens (no torch).

RoBERTa-style models number positions from ``pad_token_id + 1``, so a table of
``max_position_embeddings`` rows holds that many fewer tokens.
"""

from __future__ import annotations

# Models whose position ids start at pad_token_id + 1 (position_offset in their loaders).
PADDING_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert", "longformer")


def position_offset(model_type: str | None, pad_token_id) -> int:
    """The first position id of a model's tokens: ``pad_token_id + 1`` for RoBERTa-style
    models, else 0."""
    if (model_type in PADDING_OFFSET_TYPES and isinstance(pad_token_id, int)
            and not isinstance(pad_token_id, bool) and pad_token_id >= 0):
        return pad_token_id + 1
    return 0
