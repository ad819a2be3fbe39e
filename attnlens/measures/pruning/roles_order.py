"""The ``roles`` pruning order: heads with a tested role are kept, the others go first.

Roles come from the ``head_roles`` table an ``attnlens heads`` run writes (positional,
syntactic, rare-word heads; ``tables/head_roles.csv`` of its report folder). When the table
says which roles passed a statistical test (``view`` = ``tested``: the roles column holds
only roles with q < alpha; or a ``tested`` column; or ``q_value`` with the run's level), only
those count; tables of older runs hold untested labels, which are used as they are, and
``role_source`` says so. Within
each group (heads without a role, then heads with one) the order is a seeded random
permutation, so the curve answers one question: does protecting the role heads beat
removing heads at random? Several seeds give a band, as for ``random``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.model.head_ids import head_ids_of
from attnlens.model.protocol import has_several_attention_types

ROLE_TABLE = "head_roles.csv"
# Where a report folder keeps it (older runs: beside run.json).
ROLE_TABLE_PLACES = (Path("tables") / ROLE_TABLE, Path(ROLE_TABLE))
# Significance level used with a q_value column when no tested/role column says more.
DEFAULT_Q_LEVEL = 0.05


@dataclass
class RoleHeads:
    """The heads that keep their place, and how the table was read."""

    heads: set[tuple[str | None, int, int]]  # (attention or None, layer, head)
    source: str  # one line for the run record: which columns decided


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value) and not pd.isna(value)


def _has_role(value) -> bool:
    return isinstance(value, str) and bool(value.strip()) and value.strip() not in ("-", "none")


def read_role_heads(folder: str | Path) -> RoleHeads:
    """Heads with a (tested, where the table says) role from an ``attnlens heads`` folder."""
    path = Path(folder)
    if path.is_dir():
        places = [path / place for place in ROLE_TABLE_PLACES]
        path = next((p for p in places if p.is_file()), places[0])
    if not path.is_file():
        raise DataError(f"{path} does not exist; pass --roles the output folder of "
                        "`attnlens heads` (it holds head_roles.csv).")
    table = pd.read_csv(path, keep_default_na=False)
    for column in ("layer", "head"):
        if column not in table.columns:
            raise DataError(f"{path} has no {column!r} column; is it an `attnlens heads` table?")
    views = set(table["view"]) if "view" in table.columns else set()
    if views == {"tested"} and "roles" in table.columns:
        keep = table["roles"].map(_has_role)
        source = f"{path}: heads with a tested role (q < alpha; view 'tested')"
    elif "tested" in table.columns:
        keep = table["tested"].map(_truthy)
        if "roles" in table.columns:
            keep &= table["roles"].map(_has_role)
        source = f"{path}: heads whose role passed its test (column 'tested')"
    elif "q_value" in table.columns:
        q = pd.to_numeric(table["q_value"], errors="coerce")
        keep = q <= DEFAULT_Q_LEVEL
        source = f"{path}: heads with q_value <= {DEFAULT_Q_LEVEL}"
    elif "roles" in table.columns:
        keep = table["roles"].map(_has_role)
        source = (f"{path}: heads with any role label (this table has no test column or is "
                  "the uncorrected view: the labels are untested)")
    else:
        raise DataError(f"{path} has none of the columns tested, q_value, roles.")
    attention = table["attention"] if "attention" in table.columns else [None] * len(table)
    heads = {
        (a if isinstance(a, str) else None, int(layer), int(head))
        for a, layer, head, k in zip(attention, table["layer"], table["head"], keep, strict=True)
        if k
    }
    return RoleHeads(heads, source)


def role_mask(model, roles: RoleHeads) -> torch.Tensor:
    """``[layer, head]`` True for role heads, in the model's gate rows (encoder-decoder too)."""
    n_rows = model.n_layers
    mask = torch.zeros(n_rows, max(model.heads_per_layer), dtype=torch.bool)
    rows = model.attention_layers if has_several_attention_types(model) else None
    head_ids = head_ids_of(model)  # the table names heads by their original numbers
    for attention, layer, head in roles.heads:
        if rows is not None:
            if attention is None:
                raise ConfigError("the role table has no attention column; an encoder-decoder "
                                  "model needs the table of `attnlens heads` run on it.")
            matches = [i for i, r in enumerate(rows) if (r.attention, r.layer) == (attention,
                                                                                     layer)]
            if not matches:
                raise ConfigError(f"role head {attention} L{layer}H{head} is not in this model.")
            row = matches[0]
        else:
            if attention is not None:
                raise ConfigError("the role table describes an encoder-decoder model.")
            row = layer
        numbers = head_ids[row] if head_ids is not None and row < n_rows else None
        if row >= n_rows or (head not in numbers if numbers is not None
                             else head >= model.heads_per_layer[row]):
            raise ConfigError(f"role head L{layer}H{head} is not in this model; was the table "
                              "made for another model?")
        mask[row, numbers.index(head) if numbers is not None else head] = True
    return mask


def role_scores(model, roles: RoleHeads, seed: int) -> torch.Tensor:
    """Scores ``[layer, head]``: role heads in [1, 2), the others in [0, 1), random within."""
    gen = torch.Generator().manual_seed(seed)
    shape = (model.n_layers, max(model.heads_per_layer))
    scores = torch.rand(shape, generator=gen, dtype=torch.float64)
    scores = scores + role_mask(model, roles).double()
    for row, n in enumerate(model.heads_per_layer):
        scores[row, n:] = float("nan")
    return scores
