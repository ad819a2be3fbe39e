"""The interactive attention viewer: ``attnlens view`` and ``attnlens.view(...)``."""

from __future__ import annotations

from attnlens.viewer.data import ViewData, pack_matrices, rollout_overlay, text_attention
from attnlens.viewer.page import AttentionView, viewer_page

__all__ = ["AttentionView", "ViewData", "pack_matrices", "rollout_overlay", "text_attention",
           "view", "viewer_page"]


def view(
    text: str,
    model=None,
    tokenizer=None,
    pair: str | None = None,
    max_length: int = 512,
    rollout: bool = True,
    **load_options,
) -> AttentionView:
    """Attention of every head of ``model`` on ``text``, as an interactive viewer.

    ``model``: a HookedTransformer (then pass its ``tokenizer``), a checkpoint folder or
    cached hub id, or None for the embedded all-MiniLM-L6-v2. In a notebook the result shows
    inline; ``.save("view.html")`` writes the self-contained page.
    """
    if model is None or isinstance(model, str):
        from attnlens.loaders import load

        model, tokenizer = load(model, **load_options)
    elif tokenizer is None and getattr(model, "tokenizer", None) is not None:
        tokenizer = model.tokenizer  # set by attnlens.load
    elif tokenizer is None:
        from attnlens.errors import ConfigError

        raise ConfigError("pass the model's tokenizer with a loaded model: "
                          "view(text, model, tokenizer).")
    data = text_attention(model, tokenizer, text, pair=pair, max_length=max_length)
    if rollout:
        rollout_overlay(data)
    return AttentionView(data)
