"""The report page, built from a report folder's run.json, tables and figures only.

Static parts (header, summary, section texts, figures, run details) are HTML written here,
every string escaped; the interactive parts (tables with every row, the head map, head
cards) are drawn by ``static/report.js`` from the tables embedded as JSON.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.report.catalog import SectionDoc
from attnlens.report.embedded_png import embedded_png
from attnlens.report.findings import Finding, Head
from attnlens.report.heads_grid import head_grids, head_shape, role_cells
from attnlens.report.page import assemble_page, escape, iframe, safe_url, static_text
from attnlens.report.payload import encode_table
from attnlens.report.records import FIGURES_DIR, TABLES_DIR, ReportFiles, SectionRecord

CSS = ("common.css", "report.css")
JS = ("common.js", "tables.js", "report.js")


def _head_link(head: Head) -> str:
    return (f'<a class="headref" href="#head-{head.layer}-{head.head}" '
            f'data-layer="{head.layer}" data-head="{head.head}" '
            f'title="layer {head.layer}, head {head.head}">{head}</a>')


def _finding_html(finding: Finding) -> str:
    text = "".join(_head_link(p) if isinstance(p, Head) else escape(p) for p in finding.parts)
    source = (f' <a class="src" href="#table-{escape(finding.table)}" title="the table it comes '
              f'from"><code>{escape(finding.table)}</code></a>' if finding.table else "")
    return f"<li>{text}{source}</li>"


def _figure_html(report: ReportFiles, name: str, caption: str, embed: bool) -> str:
    files = {p.suffix: p for p in report.figure_files(name)}
    if not files:
        return ""
    links = " ".join(
        f'<a href="{FIGURES_DIR}/{escape(p.name)}">{p.suffix[1:].upper()}</a>'
        for p in files.values())
    image = ""
    shown = files.get(".svg") or files.get(".png")  # SVG first: vector, and the smaller
    if embed and shown is not None:
        mime = "image/png" if shown.suffix == ".png" else "image/svg+xml"
        raw = embedded_png(shown) if shown.suffix == ".png" else shown.read_bytes()
        data = base64.b64encode(raw).decode("ascii")
        image = (f'<img class="zoomable" alt="{escape(caption or name)}" loading="lazy" '
                 f'src="data:{mime};base64,{data}">')
    caption_html = escape(caption) if caption else f"<code>{escape(name)}</code>"
    return (f'<figure id="fig-{escape(name)}">{image}<figcaption>{caption_html} '
            f'<span class="files"><code>{escape(name)}</code> {links}</span></figcaption></figure>')


def _table_html(name: str, caption: str, df: pd.DataFrame) -> str:
    md = f' <a href="{TABLES_DIR}/{escape(name)}.md">Markdown</a>'
    return (
        f'<div class="table-block" id="table-{escape(name)}">'
        f'<h4><code>{escape(name)}</code> <span class="rows">{len(df):,} rows</span></h4>'
        + (f'<p class="caption">{escape(caption)}</p>' if caption else "")
        + f'<div class="tablewidget" data-table="{escape(name)}">'
        f'<noscript>The interactive table needs JavaScript.</noscript></div>'
        f'<p class="downloads"><a href="{TABLES_DIR}/{escape(name)}.csv">CSV</a>{md}</p></div>'
    )


def _papers_html(doc: SectionDoc) -> str:
    items = []
    for paper in doc.papers:
        url = safe_url(paper.url)
        items.append(f'<a href="{escape(url)}">{escape(paper.text)}</a>' if url
                     else escape(paper.text))
    return f'<p class="papers">{"; ".join(items)}</p>' if items else ""


def _section_html(report: ReportFiles, section: SectionRecord, embed: bool) -> str:
    doc = section.doc
    parts = [f'<section class="report-section" id="sec-{escape(section.name)}">',
             f"<h2>{escape(section.title)}</h2>"]
    if doc.about:
        parts.append(f'<p class="about">{escape(doc.about)}</p>')
    parts.append(_papers_html(doc))
    if doc.command:
        parts.append(f'<p class="command">On its own: <code>{escape(doc.command)}</code></p>')
    if section.notes:
        parts.append('<ul class="notes">'
                     + "".join(f"<li>{escape(n)}</li>" for n in section.notes) + "</ul>")
    listed = [f.name for f in doc.figures if f.name in section.figures]
    order = listed + [f for f in section.figures if f not in listed]
    figures = [_figure_html(report, f, doc.figure_doc(f).caption, embed) for f in order]
    if any(figures):
        parts.append('<div class="figures">' + "".join(figures) + "</div>")
    listed = [t.name for t in doc.tables if t.name in section.tables]
    order = [t for t in listed + [t for t in section.tables if t not in listed]
             if t in report.tables]
    if order:
        parts.append("<h3>Tables</h3>")
        parts += [_table_html(t, doc.table_doc(t).caption, report.tables[t]) for t in order]
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _value_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_value_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value_text(v) for v in value)
    return "" if value is None else str(value)


def _run_html(run: dict[str, Any]) -> str:
    rows = []
    model = run.get("model")
    if isinstance(model, dict):
        for key in ("name", "architecture", "path", "layers", "heads", "parameters"):
            if model.get(key) not in (None, ""):
                rows.append((f"model {key}", model[key]))
        checksum = model.get("checksum") or {}
        if checksum:
            rows.append(("model sha256", f"{checksum.get('sha256', '')} "
                                         f"({checksum.get('of', '')})"))
    elif model:
        rows.append(("model", model))
    for key in ("corpus", "sentences", "null", "command", "created", "attnlens"):
        if run.get(key) not in (None, ""):
            rows.append((key, run[key]))
    for key, value in (run.get("options") or {}).items():
        rows.append((f"option {key}", value))
    for key, value in (run.get("packages") or {}).items():
        rows.append((f"package {key}", value))
    timings = run.get("timings") or {}
    for key, value in timings.items():
        if key != "sections":
            rows.append((f"seconds: {key}", value))
    for key, value in (timings.get("sections") or {}).items():
        rows.append((f"seconds: section {key}", value))
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(_value_text(v))}</td></tr>"
                   for k, v in rows)
    return (f'<section id="run" class="report-section"><h2>Run</h2>'
            f'<p class="about">How this report was made (also in <code>run.json</code>).</p>'
            f'<table class="kv">{body}</table></section>')


def _header_html(run: dict[str, Any]) -> str:
    model = run.get("model")
    name = model.get("name", "") if isinstance(model, dict) else str(model or "")
    corpus = str(run.get("corpus", ""))
    count = run.get("sentences")
    facts = [corpus,
             f"{count:,} sentences" if isinstance(count, int) and "sentences" not in corpus
             else "",
             str(run.get("created", ""))[:10]]
    sub = " · ".join(escape(f) for f in facts if f)
    return (f'<header class="top"><div class="brand">attnlens</div><h1>Attention report: '
            f'{escape(name or "model")}</h1><p class="sub">{sub}</p>'
            '<p class="note">Layers and heads are numbered from 0; a head is written '
            'L2H8 (layer 2, head 8). Click a head anywhere to open its card.</p>'
            "</header>")


def _null_html(run: dict[str, Any]) -> str:
    """What the findings are held to: the null model of this run, or that there was none."""
    null = run.get("null")
    if not isinstance(null, dict):
        return ""
    if "seconds" not in null:
        return ('<p class="null-note">No null model in this run (<code>--null none</code>): '
                "the findings below are not compared with what a randomly initialised model "
                "of this shape gives.</p>")
    share = (f", {100 * float(null['share_of_run']):.0f} % of the run"
             if null.get("share_of_run") else "")
    return ('<p class="null-note">Every finding is held to a <b>null model</b>: '
            f"{escape(null.get('initialisation', 'a random initialisation'))}, run on "
            f"{escape(null.get('sentences', ''))} sentences ({escape(null.get('seconds', ''))} s"
            f"{escape(share)}). \"Beyond the null\" means outside the 95 % range of its heads "
            "(columns <code>null_mean</code>, <code>null_low</code>, <code>null_high</code> of "
            "every per-head table).</p>")


def _summary_html(findings: list[Finding], sections: list[SectionRecord],
                  run: dict[str, Any] | None = None) -> str:
    groups = []
    theory = [f for f in findings if getattr(f, "kind", "finding") == "theory"]
    findings = [f for f in findings if f not in theory]
    for section in sections:
        mine = [f for f in findings if f.section == section.name]
        if mine:
            groups.append(
                f'<div class="finding-group"><h3><a href="#sec-{escape(section.name)}">'
                f"{escape(section.title)}</a></h3><ul class=\"findings\">"
                + "".join(_finding_html(f) for f in mine) + "</ul></div>")
    if not groups:
        groups = ["<p>No findings could be drawn from the tables of this run.</p>"]
    if theory:
        groups.append(
            '<div class="finding-group theory"><h3>Guaranteed by theory</h3>'
            '<p class="hint">True of any model of this architecture, whatever its weights: '
            "measured here as a check, not findings about this model.</p>"
            '<ul class="findings">' + "".join(_finding_html(f) for f in theory) + "</ul></div>")
    return ('<section id="summary" class="report-section"><h2>Summary</h2>'
            + _null_html(run or {}) + "".join(groups) + "</section>")


def _grid_html() -> str:
    return ('<section id="heads" class="report-section"><h2>Heads at a glance</h2>'
            '<p class="about">Every head of the model, coloured by its role or by any '
            "per-head measure of the tables below. Click a head for its card: its statistics, "
            "roles with their evidence, spectrum, asymmetry and importance.</p>"
            '<div id="headmap"><noscript>The head map needs JavaScript.</noscript></div>'
            "</section>")


def _toc_html(sections: list[SectionRecord], has_grid: bool) -> str:
    links = ['<a href="#summary">Summary</a>']
    if has_grid:
        links.append('<a href="#heads">Heads at a glance</a>')
    links += [f'<a href="#sec-{escape(s.name)}">{escape(s.title)}</a>' for s in sections]
    links.append('<a href="#run">Run</a>')
    return '<nav class="toc"><div class="toc-title">Contents</div>' + "".join(links) + "</nav>"


def report_payload(report: ReportFiles, sections: list[SectionRecord],
                   only_tables: set[str] | None = None) -> dict[str, Any]:
    """The JSON the page's scripts read: tables, how to show them, card items, head grids."""
    tables: dict[str, Any] = {}
    cards = []
    for section in sections:
        for name in section.tables:
            if name not in report.tables or (only_tables is not None and name not in only_tables):
                continue
            spec = section.doc.table_doc(name)
            tables[name] = {**encode_table(report.tables[name]), "section": section.name,
                            "csv": f"{TABLES_DIR}/{name}.csv", "view": spec.view,
                            "pivot": list(spec.pivot) if spec.pivot else None,
                            "keys": list(spec.keys)}
        items = [c.__dict__ for c in section.doc.card]
        if items:
            cards.append({"section": section.name, "title": section.title, "items": items})
    needed = {i["table"] for c in cards for i in c["items"]}
    for name in needed - set(tables):  # card tables of the notebook view
        if name in report.tables:
            tables[name] = {**encode_table(report.tables[name]), "csv": "", "pivot": None,
                            "keys": [], "view": "auto", "section": ""}
    layers, heads = head_shape(report.run, report.tables)
    model = report.run.get("model") if isinstance(report.run.get("model"), dict) else {}
    return {
        "kind": "report",
        "layers": layers,
        "heads": heads,
        "kv_heads": model.get("kv_heads_per_layer"),
        "tables": tables,
        "cards": cards,
        "grids": head_grids(report.tables, sections, layers, heads),
        "roles": role_cells(report.tables, layers, heads),
    }


def report_page(report: ReportFiles, embed_figures: bool = True) -> str:
    """The whole page as a string."""
    run = report.run
    sections = report.sections()
    findings = report.findings()
    payload = report_payload(report, sections)
    has_grid = bool(payload["grids"] or payload["roles"])
    main = [_summary_html(findings, sections, run)]
    if has_grid:
        main.append(_grid_html())
    main += [_section_html(report, s, embed_figures) for s in sections]
    main.append(_run_html(run))
    body = (_header_html(run) + '<div class="layout">' + _toc_html(sections, has_grid)
            + '<main>' + "\n".join(main) + "</main></div>" + '<aside id="card" hidden></aside>'
            + '<div id="lightbox" hidden></div>')
    model = run.get("model")
    name = model.get("name", "") if isinstance(model, dict) else str(model or "")
    return assemble_page(
        f"attnlens report: {name}", body, payload,
        css=[static_text("attnlens.report", n) for n in CSS],
        js=[static_text("attnlens.report", n) for n in JS],
        body_class="report",
    )


def write_report_page(report: ReportFiles) -> Path:
    """Write ``index.html`` into the report folder (atomically)."""
    from attnlens.runs.io import atomic_open

    with atomic_open(report.index) as handle:
        handle.write(report_page(report))
    return report.index


def notebook_html(report: ReportFiles) -> str:
    """Summary, head map and cards in an iframe (figures and full tables stay in the folder)."""
    run = report.run
    sections = report.sections()
    card_tables = {i.table for s in sections for i in s.doc.card} | {"head_roles"}
    payload = report_payload(report, sections, only_tables=card_tables)
    payload["tables"] = {k: v for k, v in payload["tables"].items() if k in card_tables}
    body = (_header_html(run) + '<main class="single">' + _summary_html(report.findings(),
                                                                          sections, run)
            + _grid_html() + f'<p class="note">Full report: <code>{escape(report.index)}'
            "</code></p></main>" + '<aside id="card" hidden></aside><div id="lightbox" hidden>'
            "</div>")
    page = assemble_page("attnlens report", body, payload,
                         css=[static_text("attnlens.report", n) for n in CSS],
                         js=[static_text("attnlens.report", n) for n in JS],
                         body_class="report notebook")
    return iframe(page, height=760)
