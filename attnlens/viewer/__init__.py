"""The interactive attention viewer: ``attnlens view`` and ``attnlens.view(...)``."""

from __future__ import annotations

from pathlib import Path

from attnlens.viewer.data import DEFAULT_BUDGET, ViewData, rollout_overlay, text_attention
from attnlens.viewer.packing import pack_matrices, unpack_matrices
from attnlens.viewer.page import AttentionView, viewer_page

__all__ = ["AttentionView", "ViewData", "pack_matrices", "rollout_overlay", "text_attention",
           "unpack_matrices", "view", "viewer_page"]


def view(
    text: str,
    model=None,
    tokenizer=None,
    pair: str | None = None,
    max_length: int | None = None,
    rollout: bool = True,
    generate: int | None = None,
    report: str | Path | None = None,
    budget_bytes: int = DEFAULT_BUDGET,
    **load_options,
) -> AttentionView:
    """Attention of every head of ``model`` on ``text``, as an interactive viewer.

    ``model``: a HookedTransformer (then pass its ``tokenizer``), a checkpoint folder or
    cached hub id, or None for the embedded all-MiniLM-L6-v2. ``max_length`` None: the
    model's trained length. ``generate=N`` (causal LMs): ``text`` then N greedily generated
    tokens. ``report``: a report folder whose ``tables/head_roles.csv`` gives role badges.
    In a notebook the result shows inline, sized to its content; ``.save("view.html")``
    writes the self-contained page.
    """
    from attnlens.errors import ConfigError

    roles = None
    if report is not None:
        from attnlens.viewer.roles import read_head_roles

        roles = read_head_roles(report)
    if model is None or isinstance(model, (str, Path)):
        from attnlens.loaders import load

        model, tokenizer = load(model, **load_options)
    elif tokenizer is None and getattr(model, "tokenizer", None) is not None:
        tokenizer = model.tokenizer  # set by attnlens.load
    elif tokenizer is None:
        raise ConfigError("pass the model's tokenizer with a loaded model: "
                          "view(text, model, tokenizer).")
    if generate:
        from attnlens.viewer.generate import generation_view

        data = generation_view(model, tokenizer, text, generate, max_length, budget_bytes,
                               allow_pickle=bool(load_options.get("allow_pickle")))
    else:
        data = text_attention(model, tokenizer, text, pair=pair, max_length=max_length,
                              budget_bytes=budget_bytes)
    if roles is not None:
        from attnlens.viewer.roles import check_roles_fit

        check_roles_fit(roles, [data.head_numbers(layer) for layer in range(data.layers)])
        data.roles = roles
    if rollout:
        rollout_overlay(data)
    import warnings

    for note in data.warnings:  # on the page too; here on stderr (a notebook shows them)
        warnings.warn(note, UserWarning, stacklevel=2)
    return AttentionView(data, budget_bytes=budget_bytes)
