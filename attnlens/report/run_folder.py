"""A report folder's files, read: run.json, the tables and the figures.

Layout (what ``attnlens analyze --out DIR`` writes)::

    DIR/index.html      the page (self-contained: opens from file:// with no network)
    DIR/run.json        model and checksum, corpus, options, package versions, timings,
                        sections (their explanation, tables and figures)
    DIR/tables/         every table as NAME.csv (full precision) and NAME.md
    DIR/figures/        every figure as NAME.png (and .svg / .pdf with --format)

Older flat folders (tables and figures beside index.html) are read too. The page
(``html``) is built from these files alone; ``folder.Report`` is the object users hold.
"""


from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.errors import DataError
from attnlens.report.catalog import SectionDoc

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


class Tables(Mapping[str, pd.DataFrame]):
    """The folder's tables by name, each read from its CSV on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[str, pd.DataFrame] = {}

    def _names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.csv") if not p.name.startswith("."))

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            path = self.directory / f"{name}.csv"
            if not path.is_file():
                raise KeyError(name)
            try:
                self._cache[name] = pd.read_csv(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
                raise DataError(f"table {path} cannot be read: {exc}") from exc
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.directory / f"{name}.csv").is_file()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


class RunFolder:
    """The files of a report folder, read: its run record, tables, figures and findings
    (``folder.Report`` adds the page)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise DataError(f"report folder {self.path} does not exist.")
        if not (self.path / RUN_FILE).is_file():
            raise DataError(f"{self.path} is not an attnlens report folder (no {RUN_FILE}); "
                            "make one with `attnlens analyze --out DIR`.")
        self.tables = Tables(self.tables_dir)

    @property
    def tables_dir(self) -> Path:
        nested = self.path / TABLES_DIR
        return nested if nested.is_dir() else self.path

    @property
    def figures_dir(self) -> Path:
        nested = self.path / FIGURES_DIR
        return nested if nested.is_dir() else self.path

    @property
    def index(self) -> Path:
        return self.path / INDEX_FILE

    @property
    def run(self) -> dict[str, Any]:
        try:
            data = json.loads((self.path / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(f"{self.path / RUN_FILE} cannot be read: {exc}") from exc
        if not isinstance(data, dict):
            raise DataError(f"{self.path / RUN_FILE} does not hold a JSON object.")
        return data

    def sections(self) -> list[SectionRecord]:
        """The sections in page order; a folder without that record gets one generic section."""
        records = self.run.get("sections")
        if isinstance(records, list) and records:
            return [SectionRecord.from_json(r) for r in records if isinstance(r, dict)]
        return [SectionRecord("tables", "Tables and figures", tables=list(self.tables),
                              figures=sorted({p.stem for p in self.figure_files()}))]

    def figure_files(self, name: str | None = None) -> list[Path]:
        """Figure files (every format) of ``name``, or all of them."""
        pattern = f"{name}.*" if name else "*"
        return sorted(p for p in self.figures_dir.glob(pattern)
                      if p.suffix in FIGURE_SUFFIXES and not p.name.startswith("."))

    def findings(self) -> list:
        """The summary's findings, generated from the tables."""
        from attnlens.report.findings import find_all

        return find_all([s.name for s in self.sections()], self.tables)

    def summary_text(self) -> str:
        """The findings as plain text, one per line."""
        return "\n".join(f"- {f.text()}" for f in self.findings())
