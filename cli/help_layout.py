"""``--help`` that fits 80 columns: each option's names, negative flag and type stacked in one
column that never wraps or cuts, its description beside it.

Typer's rich help puts names, short names, negative flags (``--no-x``), types and descriptions
in six columns; at 80 columns a long name was cut (``--importance-d…``). ``install()`` makes
typer's option tables lay a row out as ``[required] names/type | description``; command lists
(two cells a row) are left as they are. tests/test_cli_options.py walks every command's help
at COLUMNS=80 to keep it so.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def _text(cell) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


class CompactOptionsTable(Table):
    """A typer options table whose option rows become ``[required] stacked names | help``."""

    def add_row(self, *cells, **kwargs) -> None:
        if len(cells) not in (6, 7):  # not an option row: as typer made it
            return super().add_row(*cells, **kwargs)
        front = list(cells[:-6])  # the required marker, when some option is required
        long, short, negative, negative_short, types, description = cells[-6:]
        lines = []
        for first, second in ((long, short), (negative, negative_short)):
            first, second = _text(first), _text(second)
            if first.plain or second.plain:
                lines.append(Text(", ").join(t for t in (first, second) if t.plain))
        if _text(types).plain:
            lines.append(_text(types))
        super().add_row(*front, Text("\n").join(lines), description, **kwargs)
        for column in self.columns[:-1]:
            column.no_wrap = True  # names and types whole; the description wraps


def install() -> None:
    """Use ``CompactOptionsTable`` for typer's option panels."""
    import typer.rich_utils

    typer.rich_utils.Table = CompactOptionsTable
