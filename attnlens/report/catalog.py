"""What a report section says about itself: explanation, papers, table and figure captions.

A ``SectionDoc`` is plain data (no model, no pandas) attached to a ``Section`` class as its
``doc`` and copied into ``run.json`` when the section runs, so that ``attnlens report DIR``
rebuilds the page from the folder alone. Adding a section to the report is declarative::

    class MySection(Section):
        name = "mine"
        title = "My measure"
        doc = SectionDoc(
            about="Two or three sentences: what the measure is and how to read it.",
            papers=(Paper("Author et al. 2021, Title", "https://arxiv.org/abs/..."),),
            command="attnlens mine",
            tables=(TableDoc("my_table", "One row per layer, head and measure.",
                             pivot=("measure", "value")),),
            figures=(FigureDoc("my_figure", "Layer x head heatmap of ..."),),
            card=(CardItem("my_table", "My measure", kind="measures"),),
        )

Tables and figures a section writes but its doc does not list are still shown, after the
listed ones, with generic captions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CARD_KINDS = ("measures", "row", "top", "rows", "curve", "examples")
TABLE_VIEWS = ("auto", "rows", "wide", "grid")


@dataclass(frozen=True)
class Paper:
    """A reference: the citation as text and, where there is one, its address."""

    text: str
    url: str = ""


@dataclass(frozen=True)
class TableDoc:
    """How to show one table.

    ``pivot = (column, value)`` offers a wide view with one column per distinct value of
    ``column`` (e.g. ``("measure", "value")``: one row per head). ``keys`` names numeric
    columns that identify a row rather than measure something (e.g. ``fraction``), so the
    layer x head grid view offers them as selectors. ``view`` is the view shown first.
    ``null`` names the column a null-model run describes (``null_mean``, ``null_low``,
    ``null_high``; ``attnlens.stats.null``); empty: ``value`` of a long per-head table.
    """

    name: str
    caption: str = ""
    view: str = "auto"
    pivot: tuple[str, str] | None = None
    keys: tuple[str, ...] = ()
    null: str = ""


@dataclass(frozen=True)
class FigureDoc:
    """A figure file (without suffix) and its caption."""

    name: str
    caption: str = ""


@dataclass(frozen=True)
class CardItem:
    """One block of the head card, read from a table with ``layer`` and ``head`` columns.

    kinds: ``measures`` (long table with ``measure``/``value``: each value with its rank among
    heads), ``row`` (one row per head: its columns), ``top`` (the head's ``limit`` rows with
    the largest ``sort``), ``rows`` (all the head's rows), ``curve`` (``x`` against ``value``
    for the head, against the mean of its layer), ``examples`` (a ``head_examples`` table: the
    head's example sentences with their tokens, pattern windows and viewer links). ``where``
    keeps rows whose column holds one of the listed values; ``above = (a, b)`` keeps rows whose
    column ``a`` exceeds column ``b`` (e.g. accuracy above its baseline); ``columns`` picks and
    orders the columns shown.
    """

    table: str
    label: str
    kind: str = "measures"
    columns: tuple[str, ...] = ()
    sort: str = ""
    limit: int = 5
    x: str = ""
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()
    above: tuple[str, ...] = ()


@dataclass(frozen=True)
class SectionDoc:
    """Explanation, references and presentation of one report section."""

    about: str = ""
    papers: tuple[Paper, ...] = ()
    command: str = ""
    tables: tuple[TableDoc, ...] = ()
    figures: tuple[FigureDoc, ...] = ()
    card: tuple[CardItem, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SectionDoc:
        """Rebuild from ``to_json`` output; unknown keys (from newer versions) are ignored."""
        data = dict(data or {})

        def pick(kind, item: dict) -> Any:
            names = kind.__dataclass_fields__
            return kind(**{k: _tuples(v) for k, v in item.items() if k in names})

        return cls(
            about=str(data.get("about", "")),
            papers=tuple(pick(Paper, p) for p in data.get("papers", ())),
            command=str(data.get("command", "")),
            tables=tuple(pick(TableDoc, t) for t in data.get("tables", ())),
            figures=tuple(pick(FigureDoc, f) for f in data.get("figures", ())),
            card=tuple(pick(CardItem, c) for c in data.get("card", ())),
        )

    def table_doc(self, name: str) -> TableDoc:
        for table in self.tables:
            if table.name == name:
                return table
        return TableDoc(name)

    def figure_doc(self, name: str) -> FigureDoc:
        for figure in self.figures:
            if figure.name == name:
                return figure
        return FigureDoc(name)


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples the frozen dataclasses hold."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
