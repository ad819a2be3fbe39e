"""A report folder and the object that stands for it in Python.

Layout (what ``attnlens analyze --out DIR`` writes)::

    DIR/index.html      the page (self-contained: opens from file:// with no network)
    DIR/run.json        model and checksum, corpus, options, package versions, timings,
                        sections (their explanation, tables and figures)
    DIR/tables/         every table as NAME.csv (full precision) and NAME.md
    DIR/figures/        every figure as NAME.svg (.png / .pdf with --format png,pdf)

The page is built from run.json and the tables alone, so ``Report(DIR).render()``
(``attnlens report DIR``) rebuilds it without the model. Older flat folders (tables and
figures beside index.html) are read too.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.errors import DataError
from attnlens.report.records import (  # re-exported: the folder's layout and section records
    FIGURE_SUFFIXES,
    FIGURES_DIR,
    INDEX_FILE,
    RUN_FILE,
    TABLES_DIR,
    SectionRecord,
)
from attnlens.runs.io import restore_formulas

INTEGER_COLUMNS = ("layer", "head")  # every per-head table numbers them from 0
NUMERIC_RECORD = "numeric_columns"  # run.json: {table: [its numeric columns when written]}


def numeric_columns(tables: Mapping[str, pd.DataFrame]) -> dict[str, list[str]]:
    """``{table: [columns holding numbers]}`` as written: what ``check_numeric_columns``
    holds a table read back to (recorded in run.json)."""
    return {name: [str(c) for c in table.columns
                   if pd.api.types.is_numeric_dtype(table[c])
                   and not pd.api.types.is_bool_dtype(table[c])]
            for name, table in tables.items()}


def check_numeric_columns(table: pd.DataFrame, path: Path, numeric: list[str] = ()) -> None:
    """Refuse a table edited by hand with text where numbers belong, naming the file, line,
    column and cell: ``layer``/``head`` (whole numbers) and the columns ``numeric`` (the
    table's numeric columns when it was written, from run.json)."""
    for column in table.columns:
        whole = column in INTEGER_COLUMNS
        cells = table[column]
        if not (whole or column in numeric) or (
                pd.api.types.is_numeric_dtype(cells) and not pd.api.types.is_bool_dtype(cells)
                and not (whole and pd.api.types.is_float_dtype(cells))):
            continue
        filled = cells.dropna()
        numbers = pd.to_numeric(filled, errors="coerce")
        bad = filled[numbers.isna() | (whole and (numbers % 1 != 0))]
        if bad.empty:
            continue
        kind = "whole numbers (numbered from 0)" if whole else "numbers"
        raise DataError(
            f"{path}:{bad.index[0] + 2}: column {column!r} holds {str(bad.iloc[0])[:40]!r}, but "
            f"the column holds {kind}; fix that cell, or rerun the command that wrote the table."
        )


class Tables(Mapping[str, pd.DataFrame]):
    """The folder's tables by name, each read from its CSV on first use."""

    def __init__(self, directory: Path,
                 numeric: Callable[[], dict[str, list[str]]] | None = None) -> None:
        self.directory = directory
        self._numeric = numeric  # the numeric columns recorded when the tables were written
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
                table = restore_formulas(pd.read_csv(path))
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
                raise DataError(f"table {path} cannot be read: {exc}") from exc
            recorded = self._numeric() if self._numeric is not None else {}
            check_numeric_columns(table, path, recorded.get(name, []))
            self._cache[name] = table
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.directory / f"{name}.csv").is_file()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


class Report:
    """A report folder: its run record, tables, findings and page.

    ``attnlens.analyze(...)`` returns one; ``Report(path)`` opens an existing folder. In a
    notebook it displays its summary and head map inline.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise DataError(f"report folder {self.path} does not exist.")
        if not (self.path / RUN_FILE).is_file():
            raise DataError(f"{self.path} is not an attnlens report folder (no {RUN_FILE}); "
                            "make one with `attnlens analyze --out DIR`.")
        self.tables = Tables(self.tables_dir, self._numeric_record)
        self._numeric_columns: dict[str, list[str]] | None = None

    def _numeric_record(self) -> dict[str, list[str]]:
        """run.json's record of the numeric columns, read once (``tables`` keeps what it read
        too; every table used to read run.json again)."""
        if self._numeric_columns is None:
            record = self.run.get(NUMERIC_RECORD)
            self._numeric_columns = record if isinstance(record, dict) else {}
        return self._numeric_columns

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

    def render(self) -> Path:
        """(Re)build index.html from run.json, the tables and the figures."""
        from attnlens.report.html import write_report_page

        return write_report_page(self)

    def write(self, out_dir: str | Path) -> Report:
        """Copy this report (run.json, tables, figures) to ``out_dir`` and build its page."""
        out = Path(out_dir)
        if out.resolve() == self.path.resolve():
            return Report(out)
        if out.exists() and any(out.iterdir()):
            raise DataError(f"output folder {out} is not empty; choose another --out.")
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.path / RUN_FILE, out / RUN_FILE)
        (out / TABLES_DIR).mkdir(exist_ok=True)
        (out / FIGURES_DIR).mkdir(exist_ok=True)
        for name in self.tables:
            for suffix in (".csv", ".md"):
                source = self.tables_dir / f"{name}{suffix}"
                if source.is_file():
                    shutil.copy2(source, out / TABLES_DIR / source.name)
        for figure in self.figure_files():
            shutil.copy2(figure, out / FIGURES_DIR / figure.name)
        copy = Report(out)
        copy.render()
        return copy

    def summary_text(self) -> str:
        """The findings as plain text, one per line."""
        return "\n".join(f"- {f.text()}" for f in self.findings())

    def _repr_html_(self) -> str:
        from attnlens.report.html import notebook_html

        return notebook_html(self)

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r}: {len(self.tables)} tables)"
