"""The viewer for a Python user: ``view(text, model)`` returns the page, and ``view_page``
builds it from a loaded model with the options `attnlens view` has (its first layer, heads
and view)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlens.errors import ConfigError
from attnlens.viewer.data import DEFAULT_BUDGET, rollout_overlay, text_attention
from attnlens.viewer.page import AttentionView


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
    page, _ = view_page(model, tokenizer, text, pair=pair, max_length=max_length,
                        rollout=rollout, generate=generate, roles=roles,
                        budget_bytes=budget_bytes,
                        allow_pickle=bool(load_options.get("allow_pickle")))
    import warnings

    for note in page.data.warnings:  # on the page too; here on stderr (a notebook shows them)
        warnings.warn(note, UserWarning, stacklevel=2)
    return page


def view_page(model, tokenizer, text: str, *, pair: str | None = None,
              max_length: int | None = None, rollout: bool = True, generate: int | None = None,
              roles=None, budget_bytes: int = DEFAULT_BUDGET, layer: int | None = None,
              heads: Sequence[int] | None = None, start_view: str | None = None,
              allow_pickle: bool = False) -> tuple[AttentionView, bool]:
    """The page of ``text`` on a loaded ``model``, opening on ``layer``, its ``heads`` (head
    numbers, as a pruned layer keeps them; None: all) and ``start_view`` (all None: the
    page's own start, layer 0, every head, the head view); ``roles``: head
    roles (``viewer.roles.read_head_roles``). Returns ``(page, whether the rollout overlay
    was added)``."""
    initial = (None if layer is None and heads is None and start_view is None else
               {"layer": layer or 0, "heads": heads, "view": start_view or "head"})
    layer, n_layers = layer or 0, model.cfg.n_layers
    if layer >= n_layers:
        raise ConfigError(f"--layer {layer}: the model has layers 0..{n_layers - 1}.")
    if generate:
        from attnlens.viewer.generate import generation_view

        data = generation_view(model, tokenizer, text, generate, max_length, budget_bytes,
                               allow_pickle=allow_pickle)
    else:
        data = text_attention(model, tokenizer, text, pair=pair, max_length=max_length,
                              budget_bytes=budget_bytes)
    numbers = data.head_numbers(layer)  # a pruned layer's heads keep their numbers
    if heads and not set(heads) <= set(numbers):
        missing = sorted(set(heads) - set(numbers))
        raise ConfigError(f"--heads: layer {layer} has no head {missing[0]}; its heads are "
                          f"{', '.join(map(str, numbers))}.")
    if initial is not None and heads:
        initial["heads"] = [numbers.index(h) for h in heads]  # positions in the page
    if roles is not None:
        from attnlens.viewer.roles import check_roles_fit

        check_roles_fit(roles, [data.head_numbers(layer) for layer in range(data.layers)])
        data.roles = roles
    added = bool(rollout and rollout_overlay(data))
    page = AttentionView(data, budget_bytes=budget_bytes, initial=initial)
    return page, added
