"""The report's summary: the measures' findings, written as sentences from the saved tables.

Each measure keeps its finders in ``attnlens/measures/<topic>/findings.py`` (registered with
``@finder("section")``; ``attnlens.measures.findings`` has the ``Finding`` and ``Head`` types
and the wording helpers, re-exported here). ``find_all`` imports the findings module of every
measure whose ``MEASURES`` entry has ``findings=True`` and runs the finders of the sections of
a report, in the report's order.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import (  # noqa: F401 (re-exported: the page and compare use them)
    FINDERS,
    Finder,
    Finding,
    Head,
    finder,
    head_of,
    measure,
    num,
    offset_role,
    offset_words,
    pct,
    trend,
)
from attnlens.measures.registry import MEASURES


def load_finders() -> dict[str, list[Finder]]:
    """Import every registered measure's findings module; the finders by section name."""
    for m in MEASURES:
        if m.findings:
            importlib.import_module(m.findings_module)
    return FINDERS


def find_all(sections: list[str], tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Every registered finder of ``sections`` (in that order) run on ``tables``."""
    finders = load_finders()
    found: list[Finding] = []
    for section in sections:
        for fn in finders.get(section, []):
            try:
                found += fn(tables)
            except KeyError:
                continue  # a table this run did not write
            except (ValueError, IndexError, TypeError) as exc:  # a table of another shape
                warnings.warn(f"finding {fn.__name__} skipped: {exc}", stacklevel=2)
    return found
