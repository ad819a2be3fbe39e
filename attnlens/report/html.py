"""A self-contained HTML page: tables inline, PNG figures embedded as base64."""

from __future__ import annotations

import base64
import html
from importlib import resources
from pathlib import Path

from attnlens.io import atomic_open
from attnlens.report.sections import SectionOutput

MAX_TABLE_ROWS = 60


def _figure_html(path: Path) -> str:
    if path.suffix == ".png":
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        alt = html.escape(path.stem)
        return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"></figure>'
    if path.suffix == ".svg":
        return f"<figure>{path.read_text(encoding='utf-8')}</figure>"
    return ""


def _section_html(section: SectionOutput) -> str:
    parts = [f"<section><h2>{html.escape(section.title)}</h2>"]
    if section.summary:
        parts.append(f"<pre>{html.escape(section.summary)}</pre>")
    for name, table in section.tables.items():
        shown = table.head(MAX_TABLE_ROWS)
        note = (
            ""
            if len(table) <= MAX_TABLE_ROWS
            else f" (first {MAX_TABLE_ROWS} of {len(table)} rows; full table in {name}.csv)"
        )
        parts.append(f"<h3>{html.escape(name)}{html.escape(note)}</h3>")
        parts.append(shown.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0))
    parts.extend(_figure_html(p) for p in section.figures)
    parts.append("</section>")
    return "\n".join(parts)


def write_html_report(sections: list[SectionOutput], path: Path, meta: dict) -> Path:
    template = resources.files("attnlens.report").joinpath("template.html").read_text("utf-8")
    meta_rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in meta.items()
    )
    page = template.replace("{{meta}}", meta_rows).replace(
        "{{sections}}", "\n".join(_section_html(s) for s in sections)
    )
    with atomic_open(path) as handle:
        handle.write(page)
    return path
