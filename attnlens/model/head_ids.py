"""Original head numbers of structurally pruned models, in every table.

A structurally pruned layer keeps some of its heads, in their order; ``model.head_ids[layer]``
lists their original numbers (``[0, 2, 5]``). Inside attnlens a head is addressed by its
position in its layer (``[layer, head]`` tensors, gates, masks); a table names it by its
original number. ``renumber_heads`` is the one place where positions become numbers: every
``head`` column (and ``head_a``, ``eval_best_head``...: any ``*head`` column beside the
matching ``*layer`` column), once per table (a renumbered table is marked in its ``attrs``,
so a second pass leaves it alone). ``head_position`` goes back, for tables read from disk.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

HeadIds = list[list[int]]

_HEAD_COLUMN = re.compile(r"^(?P<prefix>(?:.*_)?)head(?P<suffix>(?:_[ab])?)$")
_MARK = "attnlens_heads"


def head_ids_of(model: Any) -> HeadIds | None:
    """``model.head_ids`` when some layer's heads are not numbered 0, 1, ... (else None)."""
    ids = getattr(model, "head_ids", None)
    if ids is None or all(list(row) == list(range(len(row))) for row in ids):
        return None
    return [list(row) for row in ids]


def original_head(head_ids: HeadIds | None, layer: int, position: int) -> int:
    """The original number of the head at ``position`` of ``layer``."""
    if head_ids is None or not 0 <= layer < len(head_ids):
        return position
    row = head_ids[layer]
    return row[position] if 0 <= position < len(row) else position


def head_position(head_ids: HeadIds | None, layer: int, head: int) -> int:
    """The position in its layer of original head ``head`` (a ``ValueError`` if removed)."""
    if head_ids is None:
        return head
    try:
        return head_ids[layer].index(head)
    except (IndexError, ValueError):
        raise ValueError(f"layer {layer} has no head {head} (it was removed)") from None


def original_heads(head_ids: HeadIds | None,
                   heads: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(layer, position)`` pairs as ``(layer, original head)``."""
    return [(layer, original_head(head_ids, layer, h)) for layer, h in heads]


def head_positions(head_ids: HeadIds | None,
                   heads: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(layer, original head)`` pairs as ``(layer, position)``."""
    return [(layer, head_position(head_ids, layer, h)) for layer, h in heads]


def _renumber_value(head_ids: HeadIds, layer: Any, position: Any) -> Any:
    try:
        lay, pos = int(layer), int(position)
    except (TypeError, ValueError):  # NaN or empty: no head
        return position
    if lay != layer or pos != position or pos < 0:
        return position
    return original_head(head_ids, lay, pos)


def renumber_heads(table: pd.DataFrame, head_ids: HeadIds | None) -> pd.DataFrame:
    """``table`` with every ``*head`` column (beside its ``*layer`` column) holding original
    head numbers instead of positions; unchanged without pruned layers or when done."""
    import pandas as pd

    if head_ids is None or table.attrs.get(_MARK) == "original":
        return table
    table = table.copy()
    for column in table.columns:
        match = _HEAD_COLUMN.match(str(column))
        if match is None:
            continue
        layer = f"{match['prefix']}layer{match['suffix']}"
        if layer not in table.columns:
            continue
        values = [_renumber_value(head_ids, lay, pos)
                  for lay, pos in zip(table[layer], table[column], strict=True)]
        table[column] = pd.Series(values, index=table.index, dtype=table[column].dtype)
    table.attrs[_MARK] = "original"
    return table


def renumber_tables(tables: Mapping[str, pd.DataFrame], model: Any) -> dict[str, pd.DataFrame]:
    """Every table of ``tables`` renumbered for ``model`` (see ``renumber_heads``)."""
    head_ids = head_ids_of(model)
    return {name: renumber_heads(table, head_ids) for name, table in tables.items()}
