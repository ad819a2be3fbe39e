"""What a report folder holds, as plain data: its file layout and run.json's section records.

``folder.Report`` reads a folder through these; the page (``html``) is written from a folder
that offers what ``ReportFiles`` names, so it needs no import of ``folder``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attnlens.report.catalog import SectionDoc

if TYPE_CHECKING:
    import pandas as pd

TABLES_DIR = "tables"
FIGURES_DIR = "figures"
RUN_FILE = "run.json"
INDEX_FILE = "index.html"
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


@dataclass
class SectionRecord:
    """One section as run.json records it."""

    name: str
    title: str
    doc: SectionDoc = field(default_factory=SectionDoc)
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # file names without suffix
    notes: list[str] = field(default_factory=list)
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "doc": self.doc.to_json(),
                "tables": self.tables, "figures": self.figures, "notes": self.notes,
                "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SectionRecord:
        return cls(
            name=str(data.get("name", "section")),
            title=str(data.get("title", data.get("name", "Section"))),
            doc=SectionDoc.from_json(data.get("doc")),
            tables=[str(t) for t in data.get("tables", [])],
            figures=[str(f) for f in data.get("figures", [])],
            notes=[str(n) for n in data.get("notes", [])],
            seconds=data.get("seconds"),
        )


class ReportFiles(Protocol):
    """What the page reads from a report folder (``folder.Report`` provides it)."""

    path: Path
    tables: Mapping[str, pd.DataFrame]

    @property
    def index(self) -> Path: ...

    @property
    def run(self) -> dict[str, Any]: ...

    def sections(self) -> list[SectionRecord]: ...

    def figure_files(self, name: str | None = None) -> list[Path]: ...

    def findings(self) -> list: ...
