"""The attention viewer page: one self-contained HTML file (canvas drawing, no network)."""

from __future__ import annotations

from pathlib import Path

from attnlens.report.page import assemble_page, escape, iframe, static_text
from attnlens.viewer.data import DEFAULT_BUDGET, ViewData

CSS = [("attnlens.report", "common.css"), ("attnlens.viewer", "viewer.css")]
JS = [("attnlens.report", "common.js"), ("attnlens.viewer", "viewer.js")]
VIEWS = (("head", "Head view"), ("model", "Model view"), ("matrix", "Matrix"))


def viewer_page(data: ViewData, budget_bytes: int = DEFAULT_BUDGET,
                initial: dict | None = None) -> str:
    """The page; ``initial`` = {"layer", "heads", "view"} shown first."""
    n = len(data.tokens)
    tabs = "".join(f'<button type="button" class="tab" data-view="{v}">{label}</button>'
                   for v, label in VIEWS)
    body = (
        '<header class="top"><div class="brand">attnlens</div>'
        f"<h1>Attention viewer: {escape(data.model or 'model')}</h1>"
        f'<p class="sub">{n} tokens · {len(data.patterns)} layers · '
        f"{sum(p.shape[0] for p in data.patterns)} heads</p>"
        f'<p class="text">{escape(data.text)}</p>'
        '<p class="note">Layers and heads are numbered from 0. Hover a token to see where it '
        "attends (left column: the token attending, right: the tokens attended to); click to "
        "pin it.</p></header>"
        f'<div class="viewer"><div class="toolbar"><div class="tabs" role="tablist">{tabs}</div>'
        '<div id="controls"></div></div><div id="stage"></div>'
        '<p id="readout" aria-live="polite"></p></div>'
    )
    return assemble_page(
        f"attnlens viewer: {data.model}", body,
        {**data.payload(budget_bytes), "initial": {k: v for k, v in (initial or {}).items()
                                                   if v is not None}},
        css=[static_text(pkg, name) for pkg, name in CSS],
        js=[static_text(pkg, name) for pkg, name in JS],
        body_class="viewer-page",
    )


class AttentionView:
    """An attention viewer for one text: shows inline in Jupyter, ``save(path)`` writes it."""

    def __init__(self, data: ViewData, budget_bytes: int = DEFAULT_BUDGET,
                 initial: dict | None = None) -> None:
        self.data = data
        self.budget_bytes = budget_bytes
        self.initial = initial or {}

    def html(self) -> str:
        return viewer_page(self.data, self.budget_bytes, self.initial)

    def save(self, path: str | Path) -> Path:
        from attnlens.runs.io import atomic_open

        path = Path(path)
        with atomic_open(path) as handle:
            handle.write(self.html())
        return path

    def _repr_html_(self) -> str:
        return iframe(self.html(), height=min(900, 320 + 18 * len(self.data.tokens)))

    def __repr__(self) -> str:
        return (f"AttentionView({self.data.model!r}, {len(self.data.tokens)} tokens, "
                f"{len(self.data.patterns)} layers)")
