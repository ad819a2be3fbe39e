"""The head-roles section's findings: roles found, positional, syntactic and rare-word heads,
focus and attention sinks.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import (
    Finding,
    Head,
    finder,
    head_of,
    measure,
    num,
    offset_role,
    offset_words,
    pct,
)

MAIN_DIRECTIONS = ("dep->head", "head->dep")
NOT_RELATIONS = ("all relations", "punct")


@finder("heads")
def role_counts(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    roles = tables["head_roles"]["roles"].fillna("none").astype(str)
    count = {r: int(roles.str.contains(r, regex=False).sum())
             for r in ("positional", "syntactic", "rare-word")}
    with_role = int((roles != "none").sum())
    return [Finding("heads", [
        f"{with_role} of {len(roles)} heads have a role: {count['positional']} positional, "
        f"{count['syntactic']} syntactic, {count['rare-word']} rare-word."], "head_roles")]


@finder("heads")
def positional_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    table = tables["positional_heads"]
    chosen = table[table["positional"].astype(bool)].sort_values("share", ascending=False)
    if chosen.empty:
        best = table.sort_values("share", ascending=False).iloc[0]
        offset = int(best["best_offset"])
        return [Finding("heads", [
            "No head is positional; the closest is ", head_of(best), f": {pct(best['share'])} "
            f"of tokens attend most to {offset_words(offset)}."], "positional_heads")]
    found = []
    for _, row in chosen.head(3).iterrows():
        offset = int(row["best_offset"])
        found.append(Finding("heads", [
            "Head ", head_of(row), f" is a {offset_role(offset)} head: {pct(row['share'])} of "
            f"tokens attend most to {offset_words(offset)}."], "positional_heads"))
    return found


@finder("heads")
def syntactic_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    best = tables["syntactic_best"]
    rows = best[best["direction"].isin(MAIN_DIRECTIONS) & ~best["relation"].isin(NOT_RELATIONS)]
    if rows.empty:
        return []
    wins = rows[rows["syntactic"].astype(bool)]
    found = [Finding("heads", [
        f"{len(wins)} of {len(rows)} relation-direction pairs have a syntactic head (clearly "
        "above the best fixed-offset baseline)."], "syntactic_best")]
    for _, row in wins.sort_values("examples", ascending=False).head(3).iterrows():
        found.append(Finding("heads", [
            f"{row['relation']} ({row['direction']}): best head ", head_of(row),
            f", {pct(row['accuracy'])} against a {pct(row['baseline'])} positional baseline "
            f"({int(row['examples'])} arcs)."], "syntactic_best"))
    return found


@finder("heads")
def rare_word_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    table = tables["rare_words"]
    best = table.sort_values("share_rarest", ascending=False).iloc[0]
    share = (f"{pct(best['share_rarest'])} of words attend most to the sentence's rarest word "
             f"(chance {pct(best['chance_rarest'])})")
    if bool(best["rare_word"]):
        parts: list[str | Head] = ["Head ", head_of(best), f" is a rare-word head: {share}."]
    else:
        parts = ["No head is a rare-word head; the closest is ", head_of(best), f": {share}."]
    return [Finding("heads", parts, "rare_words")]


@finder("heads")
def focus_and_sinks(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    stats = tables["head_stats"]
    confidence = measure(stats, "confidence").sort_values("value", ascending=False).iloc[0]
    entropy = measure(stats, "entropy").sort_values("value", ascending=False).iloc[0]
    found = [Finding("heads", [
        "The most focused head is ", head_of(confidence),
        f" (mean maximum weight {num(confidence['value'])}); the broadest is ",
        head_of(entropy), f" (entropy {num(entropy['value'])} nats)."], "head_stats")]
    for name, token in (("to_sep", "[SEP]"), ("to_cls", "[CLS]")):
        by_layer = measure(stats, name).groupby("layer")["value"].mean()
        if by_layer.max() >= 0.3:
            found.append(Finding("heads", [
                f"Attention parks on {token} in layer {int(by_layer.idxmax())}: its heads "
                f"put {pct(by_layer.max())} of their attention there on average."],
                "head_stats"))
    return found
