"""Findings: the sentences a measure states from its saved tables, and their wording helpers.

A finder is a function ``tables -> list[Finding]`` registered for a report section's name with
``@finder("section")``; it reads only the tables (``tables[name]`` raises ``KeyError`` for a
table the run did not write, and the finder is then skipped). A finding's ``parts`` are text
and ``Head(layer, head)`` references, which the page turns into links to the head's card.

Each measure keeps its finders in ``attnlens/measures/<topic>/findings.py`` (its registry entry
says so: ``attnlens.measures.registry``); ``attnlens.report.findings.find_all`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnlens.head_names import head_name


@dataclass(frozen=True)
class Head:
    layer: int
    head: int

    def __str__(self) -> str:
        return head_name(self.layer, self.head)


@dataclass
class Finding:
    """One sentence of the summary; ``section`` is the section it links to."""

    section: str
    parts: list[str | Head] = field(default_factory=list)
    table: str = ""
    kind: str = "finding"  # or "theory": true of any model of the architecture

    def text(self) -> str:
        return "".join(str(p) for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        parts = [[p.layer, p.head] if isinstance(p, Head) else p for p in self.parts]
        return {"section": self.section, "parts": parts, "table": self.table,
                "kind": self.kind}


Finder = Callable[[Mapping[str, pd.DataFrame]], list[Finding]]
FINDERS: dict[str, list[Finder]] = {}


def finder(section: str) -> Callable[[Finder], Finder]:
    """Register ``fn`` as a source of findings for the section named ``section``."""

    def register(fn: Finder) -> Finder:
        FINDERS.setdefault(section, []).append(fn)
        return fn

    return register


# Helpers -------------------------------------------------------------------------------------
def pct(share: float) -> str:
    """0.998 -> '99.8 %'; shares just below 1 keep the digits that show they are not 1."""
    value = 100 * float(share)
    if 99.95 <= value < 100:
        return f"{value:.3f}".rstrip("0") + " %"
    return f"{value:.1f} %"


def num(value: float) -> str:
    """Three significant digits (four just below 1), exponents for tiny or huge values."""
    value = float(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.2g}"
    if 0.999 <= abs(value) < 1:
        return f"{value:.4g}"
    return f"{value:.3g}"


def head_of(row: Any) -> Head:
    return Head(int(row["layer"]), int(row["head"]))


def measure(table: pd.DataFrame, name: str) -> pd.DataFrame:
    rows = table[table["measure"] == name]
    if rows.empty:
        raise KeyError(name)
    return rows


def offset_words(offset: int) -> str:
    names = {-1: "the previous token", 1: "the next token", 0: "the token itself"}
    if offset in names:
        return names[offset]
    side = "left" if offset < 0 else "right"
    return f"the token {abs(offset)} to the {side}"


def offset_role(offset: int) -> str:
    names = {-1: "previous-token", 1: "next-token", 0: "self"}
    return names.get(offset, f"offset {offset:+d}")


SHAPE = "a randomly initialised model of this shape"


def has_null(rows: pd.DataFrame | pd.Series) -> bool:
    """True when the rows carry the null model's columns with values."""
    if isinstance(rows, pd.Series):
        return "null_high" in rows.index and not pd.isna(rows["null_high"])
    return "null_high" in rows.columns and bool(rows["null_high"].notna().any())


def versus_null(row: pd.Series, value: float, fmt=None, higher: bool = True,
                as_share: bool = False) -> tuple[bool | None, str]:
    """(beyond the null?, a clause saying so) for one row's ``value``; (None, "") without a
    null. ``higher``: large values are the notable ones (else small ones)."""
    if not has_null(row):
        return None, ""
    show = fmt or (pct if as_share else num)
    high, low = float(row["null_high"]), float(row.get("null_low", row["null_high"]))
    if higher:
        if value > high:
            return True, f"beyond the null: 95 % of the heads of {SHAPE} stay below {show(high)}"
        return False, (f"within the null: {SHAPE} gives as much (up to {show(high)}), so this "
                       "does not show learned structure")
    if value < low:
        return True, f"beyond the null: 95 % of the heads of {SHAPE} stay above {show(low)}"
    return False, (f"within the null: {SHAPE} gives as little (down to {show(low)}), so this "
                   "does not show learned structure")


def untested_reason(table: pd.DataFrame, counts: tuple[tuple[str, str, str], ...]) -> str:
    """"4 sentences < 20" for the first (count column, minimum column, noun) that falls
    short, from a table's own columns; "" when none does or the columns are absent."""
    for count, minimum, noun in counts:
        if count in table.columns and minimum in table.columns:
            have, need = int(table[count].iloc[0]), int(table[minimum].iloc[0])
            if have < need:
                return f"{have} {noun} < {need}"
    return ""


def trend(first: float, last: float, tolerance: float = 0.02) -> str:
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays near"

