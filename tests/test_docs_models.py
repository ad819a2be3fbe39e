"""docs/models.md lists every architecture the registry loads in each of its tables (issue 23:
BART, Marian and T5 were missing from both), so the page cannot fall behind the code."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of cells (header first, rule dropped)."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-", ":"} for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def test_every_model_type_and_architecture_is_in_the_tables():
    from attnlens.loaders.registry import CONVERTERS

    tables = [t for t in _tables(DOC.read_text(encoding="utf-8")) if "model_type" in t[0]]
    assert len(tables) >= 3  # parity summary, supported models, measured parity
    for table in tables:
        column = table[0].index("model_type")
        assert set(CONVERTERS) <= {row[column] for row in table[1:]}, table[0]
    verified = [t for t in tables if "architecture" in t[0]]
    expected = {a for c in CONVERTERS.values() for a in c.architectures}
    for table in verified:
        column = table[0].index("architecture")
        assert expected <= {row[column] for row in table[1:]}, table[0]
    assert verified
