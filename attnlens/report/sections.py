"""A report section: the analyzers it needs during the one corpus pass, and what it writes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnlens.analysis.base import Analyzer
from attnlens.model.transformer import HookedTransformer


@dataclass
class SectionOutput:
    """What a section wrote: tables (by name), figure paths and a short Markdown summary."""

    title: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    summary: str = ""


class Section(ABC):
    """Base class. ``analyzers`` runs before the corpus pass, ``write`` after it."""

    name = "section"
    title = "Section"
    needs_corpus = True

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[Analyzer]:
        return []

    @abstractmethod
    def write(
        self,
        model: HookedTransformer,
        analyzers: list[Analyzer],
        out_dir: Path,
        formats: tuple[str, ...],
    ) -> SectionOutput:
        """Write tables and figures into ``out_dir``; return what was written."""
