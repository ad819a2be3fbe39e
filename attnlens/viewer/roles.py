"""Role badges for the viewer: the heads a report found roles for (``tables/head_roles.csv``).

The table is the one `attnlens analyze` / `attnlens heads` writes: columns ``layer``,
``head``, ``roles`` (``"positional; syntactic"``, or ``none``) and, when present,
``evidence`` (the test behind each role) and ``view`` (``tested``: roles passed their
corrected test; ``uncorrected``: the point rules). Read with the csv module (no pandas).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from attnlens.errors import DataError

ROLE_TABLE = "head_roles.csv"
PLACES = (Path("tables") / ROLE_TABLE, Path(ROLE_TABLE))


def role_table_path(path: str | Path) -> Path:
    """The head_roles.csv of a report folder (``tables/``, or beside run.json), or the file."""
    path = Path(path).expanduser()
    if path.is_dir():
        for place in PLACES:
            if (path / place).is_file():
                return path / place
        raise DataError(f"--report {path} holds no tables/{ROLE_TABLE}; pass the output folder "
                        "of `attnlens analyze` or `attnlens heads` (or that CSV file).")
    if not path.is_file():
        raise DataError(f"--report {path} does not exist; pass a report folder or its "
                        f"tables/{ROLE_TABLE}.")
    return path


def read_head_roles(path: str | Path) -> dict[str, Any]:
    """``{"source", "view", "heads": [{"layer", "head", "roles": [...], "evidence"}]}`` for
    the heads with at least one role (checked: integer layer and head, a roles column)."""
    file = role_table_path(path)
    try:
        with file.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"cannot read {file}: {exc}.") from exc
    columns = set(rows[0]) if rows else set()
    missing = [c for c in ("layer", "head", "roles") if c not in columns]
    if missing:
        raise DataError(f"{file} has no {', '.join(missing)} column; it must be the "
                        f"{ROLE_TABLE} of an attnlens report.")
    heads = []
    for number, row in enumerate(rows, start=2):
        try:
            layer, head = int(row["layer"]), int(row["head"])
        except (TypeError, ValueError) as exc:
            raise DataError(f"{file} line {number}: layer and head must be whole numbers."
                            ) from exc
        roles = [r.strip() for r in (row["roles"] or "").split(";")
                 if r.strip() and r.strip() not in ("none", "-")]
        if roles:
            heads.append({"layer": layer, "head": head, "roles": roles,
                          "evidence": (row.get("evidence") or "").strip()})
    views = {row.get("view") for row in rows} - {None, ""}
    return {"source": str(file), "view": ", ".join(sorted(views)), "heads": heads}


def check_roles_fit(roles: dict[str, Any], head_numbers: list[list[int]]) -> None:
    """Every head the table names exists in the model (else the report is another model's).

    ``head_numbers[layer]``: the numbers of the layer's heads (a pruned model keeps its
    heads' original numbers, and its report names them so)."""
    for item in roles["heads"]:
        layer, head = item["layer"], item["head"]
        if not (0 <= layer < len(head_numbers) and head in head_numbers[layer]):
            widest = max((max(row) + 1 for row in head_numbers if row), default=0)
            raise DataError(f"--report: {roles['source']} names L{layer}H{head}, which this "
                            f"model does not have ({len(head_numbers)} layers of "
                            f"{widest} heads); is it another model's report?")
