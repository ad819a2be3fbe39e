"""A report section: the analyzers it needs during the one corpus pass, and what it writes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnlens.model.transformer import HookedTransformer
from attnlens.report.catalog import SectionDoc
from attnlens.report.side_work import SideJob
from attnlens.stream.base import Analyzer


@dataclass
class SectionOutput:
    """What a section wrote: tables (by name), figure paths and a short summary.

    ``summary`` is the text the section's own command prints; ``notes`` are the key figures
    as plain sentences for the HTML page (when empty, the page uses the summary's lines).
    """

    title: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    summary: str = ""
    notes: list[str] = field(default_factory=list)


class Section(ABC):
    """Base class. ``analyzers`` runs before the corpus pass, ``write`` after it.

    ``doc`` explains the section on the report page (see ``attnlens.report.catalog``).
    ``null_control``: the section describes heads (or layers), so a report's null-model pass
    reruns it on a randomly initialised copy of the model (``attnlens.report.null_run``).
    """

    name = "section"
    title = "Section"
    needs_corpus = True
    null_control = False
    doc = SectionDoc()

    @classmethod
    def for_report(cls) -> Section:
        """The section as `attnlens analyze` runs it (its report defaults); its own command
        may pass other options."""
        return cls()

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[Analyzer]:
        return []

    def start_beside(self, model: HookedTransformer, forked: bool) -> SideJob | None:
        """Start what ``write`` computes from ``model``'s weights alone in a forked process
        beside the corpus pass (``report.side_work``; only when ``forked``), for ``write``
        on that model to take; None when nothing was started (the default)."""
        return None

    @abstractmethod
    def write(
        self,
        model: HookedTransformer,
        analyzers: list[Analyzer],
        out_dir: Path,
        formats: tuple[str, ...],
    ) -> SectionOutput:
        """Write tables and figures into ``out_dir``; return what was written.

        Under `attnlens analyze` the tables' files (``write_table``) appear when ``write``
        has returned (each written once, null columns joined): do not read them back here."""

    def null_twin(self) -> Section:
        """The section as a report's null-model pass runs it (``report.null_run``): itself,
        unless it has work whose results no null column reads (a copy without it)."""
        return self

    def null_tables(self, model: HookedTransformer, analyzers: list[Analyzer],
                    out_dir: Path) -> dict[str, pd.DataFrame]:
        """The tables of the null-model pass, by name: every table ``write`` makes (into
        ``out_dir``), unless the section computes only those a null column can come from
        (``report.null_run.join_null``: per-head and per-layer tables of values)."""
        return self.write(model, analyzers, out_dir, ("svg",)).tables
