"""One self-contained HTML page: template, inlined CSS and JavaScript, data as JSON.

Every page attnlens writes (report, comparison, attention viewer) goes through
``assemble_page``. The page loads nothing from the network, and a Content-Security-Policy
lets only its own script run (by hash): markup smuggled into a table cell, a token or a
file name can neither load anything nor execute.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from importlib import resources
from typing import Any

from attnlens.report.payload import script_json

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def static_text(package: str, name: str) -> str:
    """A file shipped as package data in ``package``/static/."""
    return resources.files(package).joinpath("static", name).read_text(encoding="utf-8")


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def safe_url(url: str) -> str:
    """``url`` when it is an http(s) address, else "" (no javascript: or data: links)."""
    return url if re.match(r"^https?://[^\s\"'<>]+$", url or "") else ""


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; img-src data: blob:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )


def assemble_page(
    title: str,
    body: str,
    data: Any,
    css: list[str],
    js: list[str],
    body_class: str = "",
) -> str:
    """The page: ``body`` (already escaped HTML), ``data`` as JSON for the scripts."""
    script = "\n" + "\n".join(js) + "\n"  # exactly the <script> element's text: its hash
    values = {
        "title": escape(title),
        "csp": escape(_csp(script)),
        "css": "\n".join(css),
        "body_class": escape(body_class),
        "body": body,
        "data": script_json(data),
        "js": script,
    }
    template = resources.files("attnlens.report").joinpath("template.html").read_text("utf-8")
    # One pass: text substituted in never gets scanned for placeholders again.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def iframe(page: str, height: int = 720) -> str:
    """``page`` inside an isolated iframe (for notebooks): its scripts and styles stay in."""
    return (f'<iframe srcdoc="{escape(page)}" style="width:100%;height:{int(height)}px;'
            'border:1px solid #ddd;border-radius:6px" sandbox="allow-scripts allow-downloads">'
            "</iframe>")
