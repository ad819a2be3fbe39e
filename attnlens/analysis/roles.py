"""Head roles: positional, syntactic and rare-word heads, with the evidence for each.

Built from the tables of ``PositionalHeads``, ``SyntacticHeads`` and ``RareWordHeads``
(``result()``); a head can have several roles or none. Their figures (a layer x head role map,
per-relation accuracy heatmaps) are drawn in ``attnlens.plots``.
"""

from __future__ import annotations

import pandas as pd

from attnlens.analysis.syntactic import ALL_RELATIONS, MAIN_DIRECTIONS

ROLES = ("positional", "syntactic", "rare-word")
# Arcs of these relations are measured and tabled but never make a head "syntactic":
# punctuation attaches by convention, not by grammar, and its offset baseline is weak.
NOT_A_ROLE = ("punct",)


def _syntactic_evidence(accuracy: pd.DataFrame | None) -> pd.DataFrame:
    """Rows of the main directions per (layer, head, relation), "all relations" excluded."""
    if accuracy is None or accuracy.empty:
        return pd.DataFrame(columns=["layer", "head", "relation", "direction", "accuracy",
                                     "baseline", "syntactic"])
    rows = accuracy[accuracy["direction"].isin(MAIN_DIRECTIONS)]
    return rows[~rows["relation"].isin([ALL_RELATIONS, *NOT_A_ROLE])]


def role_evidence(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy: one row per (head, role) found, with the evidence and what it was compared to."""
    records = []
    for row in positional[positional["positional"]].itertuples():
        records.append({"layer": row.layer, "head": row.head, "role": "positional",
                        "detail": f"offset {row.best_offset:+d}", "value": row.share,
                        "compared_to": "threshold"})
    syn = _syntactic_evidence(syntactic_accuracy)
    for row in syn[syn["syntactic"]].itertuples():
        records.append({"layer": row.layer, "head": row.head, "role": "syntactic",
                        "detail": f"{row.relation} {row.direction}", "value": row.accuracy,
                        "compared_to": f"baseline {row.baseline:.3f}"})
    if rare_words is not None:
        for row in rare_words[rare_words["rare_word"]].itertuples():
            records.append({"layer": row.layer, "head": row.head, "role": "rare-word",
                            "detail": "rarest word", "value": row.share_rarest,
                            "compared_to": f"chance {row.chance_rarest:.3f}"})
    columns = ["layer", "head", "role", "detail", "value", "compared_to"]
    return pd.DataFrame.from_records(records, columns=columns).sort_values(
        ["layer", "head", "role"], ignore_index=True
    )


def classify_heads(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per head: its roles ("none" when it has none) and the evidence behind each."""
    evidence = role_evidence(positional, syntactic_accuracy, rare_words)
    syn = _syntactic_evidence(syntactic_accuracy)
    table = positional[["layer", "head", "best_offset", "share"]].rename(
        columns={"share": "offset_share"}
    )
    if not syn.empty:
        margin = syn.assign(margin=syn["accuracy"] - syn["baseline"])
        top = margin.loc[margin.groupby(["layer", "head"])["margin"].idxmax()]
        top = top.assign(best_relation=top["relation"] + " " + top["direction"])
        table = table.merge(
            top[["layer", "head", "best_relation", "accuracy", "baseline"]].rename(
                columns={"accuracy": "relation_accuracy", "baseline": "relation_baseline"}
            ),
            on=["layer", "head"],
            how="left",
        )
    if rare_words is not None:
        table = table.merge(
            rare_words[["layer", "head", "share_rarest", "share_two_rarest"]],
            on=["layer", "head"],
            how="left",
        )
    roles, details = [], []
    for row in table.itertuples():
        found = evidence[(evidence["layer"] == row.layer) & (evidence["head"] == row.head)]
        names = [r for r in ROLES if r in set(found["role"])]
        roles.append("; ".join(names) if names else "none")
        details.append(
            "; ".join(f"{r.role}: {r.detail} ({r.value:.2f})" for r in found.itertuples())
        )
    return table.assign(roles=roles, evidence=details)
