"""The comparison page (difference heatmaps, role changes, largest differences) and the
comparison folder: its tables, run.json and index.html (``write_comparison``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.report.compare import Comparison
from attnlens.report.findings import Head, num
from attnlens.report.folder import RUN_FILE, TABLES_DIR
from attnlens.report.html import CSS, JS, _head_link, _table_html
from attnlens.report.page import assemble_page, escape, static_text
from attnlens.report.payload import encode_table
from attnlens.runs.io import atomic_open, check_output_dir, write_table

PAGE_TABLES = {
    "head_changes": "Heads ranked by how much their attention pattern changed: pattern_change "
                    "is the total variation distance between A's and B's distributions of "
                    "where each token's maximum attention goes (0: the same, 1: disjoint); "
                    "stats_change the mean absolute change of the head's attention "
                    "statistics; measures_changed how many of its values moved above the floor.",
    "largest_differences": "The largest differences B - A, ranked by relative change "
                           "(b - a) / max(|a|, |b|) among the changes above the floor (1 % of "
                           "the measure's largest value); scaled: the difference over the "
                           "measure's spread across heads.",
    "role_changes": "Heads whose roles differ between the runs.",
    "measure_differences": "Per measure: mean values in A and B, mean and largest difference.",
    "head_differences": "Per head: its largest differences (what the head cards show).",
}
CARD = [{"section": "compare", "title": "Comparison", "items": [
    {"table": "role_changes", "label": "Roles A → B", "kind": "row",
     "columns": ["roles_a", "roles_b", "evidence_a", "evidence_b"]},
    {"table": "head_changes", "label": "How much this head's pattern changed", "kind": "row",
     "columns": ["pattern_change", "stats_change", "measures_changed", "largest_change"]},
    {"table": "head_differences", "label": "Largest differences of this head", "kind": "rows",
     "columns": ["table", "label", "measure", "a", "b", "difference", "relative"]},
]}]


def _model_name(run: dict[str, Any]) -> str:
    model = run.get("model")
    return str(model.get("name", "")) if isinstance(model, dict) else str(model or "")


LABELS = (
    "How to read the rows: <b>table</b> is the report table a value comes from; <b>label</b> "
    "the values of its other identifying columns (e.g. <code>nsubj dep-&gt;head</code> of "
    "<code>syntactic_accuracy</code>, <code>0.25</code> of <code>spectrum_curve</code>'s "
    "fraction); <b>measure</b> the column or <code>measure</code> compared; <b>a</b>, <b>b</b> "
    "its values; <b>difference</b> b - a; <b>relative</b> the difference over max(|a|, |b|); "
    "<b>scaled</b> the difference over the measure's spread across heads. Only changes of at "
    "least 1 % of the measure's largest value are ranked (the floor), so a column that hardly "
    "varies cannot top the list with a tiny step."
)


def _pattern_items(comparison: Comparison, shown: int = 5) -> list[str]:
    """The summary's opening: the heads whose attention patterns changed most."""
    changes = comparison.tables.get("head_changes")
    if changes is None or changes.empty:
        return []
    moved = changes[changes["pattern_change"].fillna(changes["stats_change"]).fillna(0) > 0]
    if moved.empty:
        return ["<li>No head's attention pattern changed.</li>"]
    parts = []
    for row in moved.head(shown).to_dict("records"):
        link = _head_link(Head(int(row["layer"]), int(row["head"])))
        if not pd.isna(row["pattern_change"]):
            what = f"total variation {num(row['pattern_change'])}"
        else:
            what = f"statistics moved {num(row['stats_change'])} on average"
        parts.append(f"{link} ({escape(what)})")
    return ["<li>Heads whose attention patterns changed most (where their tokens' maximum "
            "attention goes): " + ", ".join(parts) + ".</li>"]


def _findings(comparison: Comparison) -> list[str]:
    items = [f"<li>{escape(w)}</li>" for w in comparison.warnings]
    items += _pattern_items(comparison)
    changes = comparison.tables["role_changes"]
    items.append(f"<li>{len(changes)} heads changed role.</li>")
    largest = comparison.tables["largest_differences"]
    for row in largest.head(5).to_dict("records"):
        head = _head_link(Head(int(row["layer"]), int(row["head"])))
        what = escape(f"{row['label']} {row['measure']}".strip())
        change = escape(f"{row['difference']:+.3g}")
        relative = "" if pd.isna(row.get("relative")) else f", {100 * row['relative']:+.0f} %"
        items.append(f"<li>{head}, <code>{escape(row['table'])}</code> {what}: "
                     f"{escape(num(row['a']))} → {escape(num(row['b']))} ({change}"
                     f"{escape(relative)}).</li>")
    if largest.empty:
        items.append("<li>No per-head measure differs between the runs.</li>")
    return items


def _run_column(label: str, run: dict[str, Any], path: str) -> str:
    model = run.get("model") if isinstance(run.get("model"), dict) else {}
    checksum = (model.get("checksum") or {}).get("sha256", "")
    rows = [("folder", path), ("model", _model_name(run)), ("sha256", checksum),
            ("corpus", run.get("corpus", "")), ("sentences", run.get("sentences", "")),
            ("created", run.get("created", ""))]
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows if v)
    return f'<div><h3>{escape(label)}</h3><table class="kv">{body}</table></div>'


def compare_page(comparison: Comparison) -> str:
    run_a, run_b = comparison.a.run, comparison.b.run
    name_a, name_b = _model_name(run_a), _model_name(run_b)
    tables: dict[str, Any] = {}
    blocks = []
    for name, caption in PAGE_TABLES.items():
        table = comparison.tables[name]
        tables[name] = {**encode_table(table), "csv": f"{TABLES_DIR}/{name}.csv", "view": "rows",
                        "pivot": None, "keys": [], "section": "compare"}
        blocks.append(_table_html(name, caption, table))
    diffs: pd.DataFrame = comparison.tables["differences"]
    payload = {"kind": "compare", "layers": comparison.layers, "heads": comparison.heads,
               "tables": tables, "cards": CARD, "grids": comparison.grids,
               "roles": comparison.role_cells}
    body = (
        '<header class="top"><div class="brand">attnlens</div>'
        f"<h1>Comparison: {escape(name_a)} (A) and {escape(name_b)} (B)</h1>"
        f'<p class="sub">A: <code>{escape(comparison.a.path)}</code> · B: '
        f"<code>{escape(comparison.b.path)}</code></p>"
        '<p class="note">Differences are B - A. Layers and heads are numbered from 0; a head '
        "is written L2H8 (layer 2, head 8). Click a head for its card.</p></header>"
        '<div class="layout"><nav class="toc"><div class="toc-title">Contents</div>'
        '<a href="#summary">Summary</a><a href="#heads">Differences per head</a>'
        '<a href="#sec-tables">Tables</a><a href="#run">Runs</a></nav><main>'
        '<section id="summary" class="report-section"><h2>Summary</h2><ul class="findings">'
        + "".join(_findings(comparison)) + "</ul>"
        f'<p class="about labels">{LABELS}</p></section>'
        '<section id="heads" class="report-section"><h2>Differences per head</h2>'
        '<p class="about">Choose a measure: each cell is B - A for that head (blue: lower in '
        "B, red: higher). \"Roles\" marks heads that gained, lost or changed a role.</p>"
        '<div id="headmap"></div></section>'
        '<section id="sec-tables" class="report-section"><h2>Tables</h2>'
        + "".join(blocks)
        + f'<p class="downloads">Every difference ({len(diffs):,} rows): '
        f'<a href="{TABLES_DIR}/differences.csv">differences.csv</a></p></section>'
        '<section id="run" class="report-section"><h2>Runs</h2><div class="runs">'
        + _run_column("A", run_a, str(comparison.a.path))
        + _run_column("B", run_b, str(comparison.b.path))
        + "</div></section></main></div>"
        '<aside id="card" hidden></aside><div id="lightbox" hidden></div>'
    )
    return assemble_page(
        f"attnlens comparison: {name_a} vs {name_b}", body, payload,
        css=[static_text("attnlens.report", n) for n in CSS]
        + [".runs { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }"],
        js=[static_text("attnlens.report", n) for n in JS],
        body_class="report compare",
    )


def write_comparison(comparison: Comparison, out_dir: str | Path) -> Path:
    """Tables (CSV + Markdown), run.json and index.html into ``out_dir``; returns the page."""
    out = check_output_dir(out_dir)
    for name, table in comparison.tables.items():
        formats = ("csv",) if name == "differences" else ("csv", "md")
        write_table(table, out / TABLES_DIR, name, formats=formats)
    record = {"kind": "comparison", "a": str(comparison.a.path), "b": str(comparison.b.path),
              "model_a": comparison.a.run.get("model"), "model_b": comparison.b.run.get("model"),
              "warnings": comparison.warnings, "layers_and_heads_numbered_from": 0}
    with atomic_open(out / RUN_FILE) as handle:
        json.dump(record, handle, indent=2, default=str)
        handle.write("\n")
    page = out / "index.html"
    with atomic_open(page) as handle:
        handle.write(compare_page(comparison))
    return page
