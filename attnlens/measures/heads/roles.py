"""Head roles: positional, syntactic and rare-word heads, each a tested claim with its evidence.

Built from the tables of ``PositionalHeads``, ``SyntacticHeads`` and ``RareWordHeads``
(``result()``), plus any further tests in the same columns (``extra``: the language-model
roles of ``attnlens.measures.lm_heads``); a head can have several roles or none. Every
candidate role is a row of ``role_tests``: the estimate, its bootstrap interval over
sentences, what it is compared to, the one-sided p-value and the q-value corrected within its
family (every head for positional and rare-word heads; every head x relation x main direction
for syntactic heads; every head for each language-model role).

Two views: ``tested`` (default) grants a role when ``q_value < alpha``; ``uncorrected`` keeps
the point-estimate rules (share >= threshold; accuracy >= baseline + margin) for comparison
with earlier work. With ``--bootstrap 0`` nothing is tested and both views use the point
rules. Figures of these tables are in ``attnlens.plots`` (``role_map``, ``relation_heatmaps``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.measures.heads.syntactic_arcs import ALL_RELATIONS, MAIN_DIRECTIONS, NOT_A_ROLE

ROLES = ("positional", "syntactic", "rare-word", "induction", "duplicate_token",
         "previous_token", "sink", "retrieval")
VIEWS = ("tested", "uncorrected")
TEST_COLUMNS = [
    "role", "layer", "head", "detail", "value", "ci_low", "ci_high", "reference",
    "compared_to", "tested", "p_value", "q_value", "n_sentences", "n_examples", "passed",
    "above_rule",
]
EVIDENCE_COLUMNS = ["layer", "head", "role", "detail", "value", "ci_low", "ci_high",
                    "compared_to", "tested", "p_value", "q_value", "n_sentences", "n_examples"]


def _syntactic_rows(accuracy: pd.DataFrame | None) -> pd.DataFrame:
    """Rows of the main directions that can make a head syntactic (not punct, not pooled)."""
    if accuracy is None or accuracy.empty:
        return pd.DataFrame(columns=["layer", "head", "relation", "direction", "accuracy",
                                     "baseline", "syntactic"])
    rows = accuracy[accuracy["direction"].isin(MAIN_DIRECTIONS)]
    return rows[~rows["relation"].isin([ALL_RELATIONS, *NOT_A_ROLE])]


def _positional_tests(positional: pd.DataFrame) -> pd.DataFrame:
    threshold = positional["threshold"]
    return pd.DataFrame({
        "role": "positional", "layer": positional["layer"], "head": positional["head"],
        "detail": [f"offset {o:+d}" for o in positional["best_offset"]],
        "value": positional["share"], "ci_low": positional["ci_low"],
        "ci_high": positional["ci_high"], "reference": threshold,
        "compared_to": [f"threshold {t:.2f}" for t in threshold], "tested": positional["tested"],
        "p_value": positional["p_value"], "q_value": positional["q_value"],
        "n_sentences": positional["n_sentences"], "n_examples": positional["tokens"],
        "passed": positional["positional"], "above_rule": positional["above_threshold"],
    })


def _syntactic_tests(accuracy: pd.DataFrame | None) -> pd.DataFrame:
    rows = _syntactic_rows(accuracy)
    if rows.empty:
        return pd.DataFrame(columns=TEST_COLUMNS)
    return pd.DataFrame({
        "role": "syntactic", "layer": rows["layer"], "head": rows["head"],
        "detail": rows["relation"] + " " + rows["direction"], "value": rows["accuracy"],
        "ci_low": rows["ci_low"], "ci_high": rows["ci_high"],
        "reference": rows["baseline"] + rows["min_excess"],
        "compared_to": [f"baseline {b:.3f} + margin {m:.2f}"
                        for b, m in zip(rows["baseline"], rows["min_excess"], strict=True)],
        "tested": rows["tested"], "p_value": rows["p_value"], "q_value": rows["q_value"],
        "n_sentences": rows["n_sentences"], "n_examples": rows["examples"],
        "passed": rows["syntactic"], "above_rule": rows["above_margin"],
    })


def _rare_tests(rare: pd.DataFrame | None) -> pd.DataFrame:
    if rare is None or rare.empty:
        return pd.DataFrame(columns=TEST_COLUMNS)
    return pd.DataFrame({
        "role": "rare-word", "layer": rare["layer"], "head": rare["head"],
        "detail": "rarest word", "value": rare["share_rarest"], "ci_low": rare["ci_low"],
        "ci_high": rare["ci_high"], "reference": rare["threshold"],
        "compared_to": [f"threshold {t:.2f} (chance {c:.3f})"
                        for t, c in zip(rare["threshold"], rare["chance_rarest"], strict=True)],
        "tested": rare["tested"], "p_value": rare["p_value"], "q_value": rare["q_value"],
        "n_sentences": rare["sentences"], "n_examples": rare["words"],
        "passed": rare["rare_word"], "above_rule": rare["above_threshold"],
    })


def role_tests(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
    extra: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy: one row per candidate (head, role, detail) with its test (see module docstring).

    ``passed`` is the tested role (q < alpha, corrected within the role's family);
    ``above_rule`` the uncorrected point-estimate rule. ``extra``: further tests with these
    columns (the language-model roles).
    """
    parts = [_positional_tests(positional), _syntactic_tests(syntactic_accuracy),
             _rare_tests(rare_words)]
    if extra is not None and not extra.empty:
        parts.append(extra[TEST_COLUMNS])
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=TEST_COLUMNS)
    table = pd.concat(parts, ignore_index=True)[TEST_COLUMNS]
    for column in ("tested", "passed", "above_rule"):
        table[column] = table[column].astype(bool)
    return table


def role_evidence(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
    view: str = "tested",
    extra: pd.DataFrame | None = None,
    tests: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy: one row per (head, role, detail) granted in ``view``, with its evidence.
    ``tests``: ``role_tests`` of the same tables, when the caller has it already."""
    if tests is None:
        tests = role_tests(positional, syntactic_accuracy, rare_words, extra)
    granted = tests[tests["passed" if view == "tested" else "above_rule"]]
    return granted[EVIDENCE_COLUMNS].sort_values(
        ["layer", "head", "role"], ignore_index=True, kind="stable")


def classify_heads(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
    view: str = "tested",
    extra: pd.DataFrame | None = None,
    evidence: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per head: its roles ("none" when it has none) and the evidence behind each.
    ``evidence``: ``role_evidence`` of the same tables and view, when the caller has it."""
    if evidence is None:
        evidence = role_evidence(positional, syntactic_accuracy, rare_words, view, extra)
    syn = _syntactic_rows(syntactic_accuracy)
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
    found: dict[tuple[int, int], list[dict]] = {}
    for record in evidence.to_dict("records"):  # plain dicts: one pass, no per-head frames
        found.setdefault((int(record["layer"]), int(record["head"])), []).append(record)
    roles, details, counts = [], [], []
    for layer, head in zip(table["layer"], table["head"], strict=True):
        rows = found.get((int(layer), int(head)), [])
        names = [r for r in ROLES if any(row["role"] == r for row in rows)]
        roles.append("; ".join(names) if names else "none")
        counts.append(sum(row["role"] == "syntactic" for row in rows))
        details.append("; ".join(_evidence_text(row) for row in rows))
    return table.assign(roles=roles, n_relations=counts, evidence=details, view=view)


def _evidence_text(row: dict) -> str:
    ci_low, ci_high, q = (float(row[k]) for k in ("ci_low", "ci_high", "q_value"))
    interval = "" if np.isnan(ci_low) else f" [{ci_low:.2f}, {ci_high:.2f}]"
    tested = "" if np.isnan(q) else f", q={q:.2g}"
    return f"{row['role']}: {row['detail']} ({float(row['value']):.2f}{interval}{tested})"


def role_counts(head_roles: pd.DataFrame) -> dict[str, int]:
    """Heads with each role (a head with several roles counts once per role)."""
    return {role: int(head_roles["roles"].str.split("; ").apply(lambda r, x=role: x in r).sum())
            for role in ROLES}
