"""The attention viewer page: one self-contained HTML file (canvas drawing, no network)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from attnlens.report.page import assemble_page, escape, static_text
from attnlens.viewer.data import DEFAULT_BUDGET, ViewData

CSS = [("attnlens.report", "common.css"), ("attnlens.viewer", "viewer.css")]
JS = [("attnlens.report", "common.js"), ("attnlens.viewer", "viewer_data.js"),
      ("attnlens.viewer", "viewer_text.js"), ("attnlens.viewer", "viewer_matrix.js"),
      ("attnlens.viewer", "viewer.js")]  # one script, in this order (viewer.js starts it)
VIEWS = (("head", "Head view"), ("text", "Text view"), ("model", "Model view"),
         ("matrix", "Matrix"))
NOTEBOOK_MAX_HEIGHT = 2400  # px: a notebook cell never grows past this


def storage_note(payload: dict[str, Any]) -> str:
    """What the page stores of the attention, in one or two sentences (exact or not)."""
    packed = payload["patterns"]
    if packed["format"] == "dense":
        note = "Every attention weight is stored exactly (float32, as the model computed it)."
    else:
        stats = packed["stats"]
        share = stats["covered"] / max(1, stats["rows"])
        cap = (f", at most {packed['cap']} per query to keep the page within its size budget"
               if packed["cap"] else "")
        note = (f"Long input: each query stores its largest weights exactly (float32, as the "
                f"model computed them) until they hold {packed['mass']:.0%} of its attention"
                f"{cap}; {share:.0%} of queries reach {packed['mass']:.0%}, the least covered "
                f"stores {stats['min_stored_mass']:.0%}. A weight not stored is at most its "
                "row's smallest stored weight and is drawn at the row's mean unstored weight "
                "(marked ≈ in the readout).")
    if payload["n"] > payload["thumbs"]["side"]:
        note += (" Model-view thumbnails show the maximum of each block of the full "
                 "matrices.")
    return note


def _header(data: ViewData, payload: dict[str, Any], compact: bool) -> str:
    n = data.n
    heads = sum(data.heads)
    facts = [f"{n} tokens", f"{data.layers} layers", f"{heads} heads"]
    if any(kv < h for kv, h in zip(data.kv_heads, data.heads, strict=True)):
        facts.append(f"{max(data.kv_heads)} key/value heads per layer (grouped-query)")
    if data.causal:
        facts.append("causal mask")
    if data.trained:
        facts.append(f"trained on {data.trained['tokens']} tokens ({data.trained['source']})")
    warnings = "".join(f'<p class="warning">Warning: {escape(w)}</p>' for w in data.warnings)
    opened = "" if compact or n > 200 else " open"  # long texts: the text view shows them
    text = (f'<details class="text-box"{opened}><summary>Text</summary>'
            f'<p class="text">{escape(data.text)}</p></details>')
    generation = ""
    if data.generation:
        g = data.generation
        method = g["method"][:1].upper() + g["method"][1:]
        generation = (f'<p class="note generation">Prompt of {data.prompt_length} tokens + '
                      f"{g['generated']} generated (of {g['requested']} asked): "
                      f"“{escape(g['continuation'])}”. {escape(method)}.</p>")
    roles = ""
    if data.roles:
        roles = (f'<p class="note">Role badges from {escape(data.roles["source"])}'
                 f'{" (" + escape(data.roles["view"]) + ")" if data.roles["view"] else ""}: '
                 f'{len(data.roles["heads"])} head{"" if len(data.roles["heads"]) == 1 else "s"}'
                 " with a role.</p>")
    help_text = ("Layers and heads are numbered from 0 (L2H8: layer 2, head 8). Hover a token "
                 "to see where it attends; click to pin it.")
    return (
        f'<header class="top{" compact" if compact else ""}"><div class="brand">attnlens</div>'
        f"<h1>Attention viewer: {escape(data.model or 'model')}</h1>"
        f'<p class="sub">{escape(" · ".join(facts))}</p>{warnings}{text}{generation}'
        f'<p class="note" id="storage">{escape(storage_note(payload))}</p>{roles}'
        f'<p class="note">{help_text}</p></header>'
    )


def viewer_page(data: ViewData, budget_bytes: int = DEFAULT_BUDGET,
                initial: dict | None = None, compact: bool = False) -> str:
    """The page; ``initial`` = {"layer", "heads", "view", "query"} shown first (the page's
    address, ``#layer=2&head=8&view=text``, overrides it); ``compact``: a one-line header
    (notebooks)."""
    payload = data.payload(budget_bytes)
    tabs = "".join(f'<button type="button" class="tab" data-view="{v}">{label}</button>'
                   for v, label in VIEWS)
    body = (
        _header(data, payload, compact)
        + f'<div class="viewer"><div class="toolbar"><div class="tabs" role="tablist">{tabs}'
        '</div><div id="controls"></div></div><div id="stage"></div></div>'
        '<div id="readout" role="status" aria-live="polite"></div>'
    )
    start = {k: v for k, v in (initial or {}).items() if v is not None}
    return assemble_page(
        f"attnlens viewer: {data.model}", body,
        {**payload, "initial": start | ({"embed": True} if compact else {})},
        css=[static_text(pkg, name) for pkg, name in CSS],
        js=[static_text(pkg, name) for pkg, name in JS],
        body_class="viewer-page" + (" embedded" if compact else ""),
    )


def notebook_html(page: str, rows: int) -> str:
    """``page`` in a sandboxed iframe that takes the height of its content: the page posts
    its height (``attnlens-height`` messages) and a listener sizes the frame; ``rows`` sets
    the first guess (visible before the page has run, or where scripts do not run)."""
    frame = f"attnlens-view-{uuid.uuid4().hex[:12]}"
    guess = 190 + 20 * min(rows, 24) + 60
    listener = (
        "(function(){var f=document.getElementById('" + frame + "');"
        "window.addEventListener('message',function(e){if(!f||e.source!==f.contentWindow||"
        "!e.data||e.data.kind!=='attnlens-height')return;"
        f"f.style.height=Math.min({NOTEBOOK_MAX_HEIGHT},Math.ceil(e.data.height))+'px';}});}})();"
    )
    return (f'<iframe id="{frame}" srcdoc="{escape(page)}" style="width:100%;height:{guess}px;'
            'border:1px solid #ddd;border-radius:6px" sandbox="allow-scripts allow-downloads">'
            f"</iframe><script>{listener}</script>")


class AttentionView:
    """An attention viewer for one text: shows inline in Jupyter, ``save(path)`` writes it."""

    def __init__(self, data: ViewData, budget_bytes: int = DEFAULT_BUDGET,
                 initial: dict | None = None) -> None:
        self.data = data
        self.budget_bytes = budget_bytes
        self.initial = initial or {}

    def html(self, compact: bool = False) -> str:
        return viewer_page(self.data, self.budget_bytes, self.initial, compact=compact)

    def save(self, path: str | Path) -> Path:
        from attnlens.runs.io import atomic_open

        path = Path(path)
        with atomic_open(path) as handle:
            handle.write(self.html())
        return path

    def _repr_html_(self) -> str:
        return notebook_html(self.html(compact=True), self.data.n)

    def __repr__(self) -> str:
        return (f"AttentionView({self.data.model!r}, {self.data.n} tokens, "
                f"{self.data.layers} layers)")
