"""The head-roles section's findings: roles found, positional, syntactic and rare-word heads,
focus and attention sinks.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import (
    SHAPE,
    Finding,
    Head,
    finder,
    has_null,
    head_of,
    measure,
    num,
    offset_role,
    offset_words,
    pct,
    untested_reason,
    versus_null,
)
from attnlens.measures.lm_heads.findings import LM_ROLE_WORDS, LM_ROLES

MAIN_DIRECTIONS = ("dep->head", "head->dep")
NOT_RELATIONS = ("all relations", "punct")


@finder("heads")
def role_counts(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    roles = tables["head_roles"]["roles"].fillna("none").astype(str)
    named = roles.str.split("; ")  # "positional; induction" or "none"
    count = {r: int(named.apply(lambda found, r=r: r in found).sum())
             for r in ("positional", "syntactic", "rare-word", *LM_ROLES)}
    with_role = int((roles != "none").sum())
    lm = ", ".join(f"{count[r]} {LM_ROLE_WORDS[r]}" for r in LM_ROLES if count[r])
    return [Finding("heads", [
        f"{with_role} of {len(roles)} heads have a role: {count['positional']} positional, "
        f"{count['syntactic']} syntactic, {count['rare-word']} rare-word"
        + (f"; language-model roles: {lm}." if lm else ".")], "head_roles")]


@finder("heads")
def positional_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    table = tables["positional_heads"]
    best = table.sort_values("share", ascending=False).iloc[0]
    offset = int(best["best_offset"])
    if "tested" in table.columns and not table["tested"].astype(bool).any():
        reason = untested_reason(table, (("n_sentences", "min_sentences", "sentences"),
                                         ("tokens", "min_tokens", "query tokens")))
        return [Finding("heads", [
            f"Positional heads not tested ({reason or 'too little data'}); the largest share, ",
            head_of(best), f"'s {pct(best['share'])} of tokens attending most to "
            f"{offset_words(offset)}, is an illustration, not evidence."], "positional_heads")]
    chosen = table[table["positional"].astype(bool)].sort_values("share", ascending=False)
    if chosen.empty:
        _, clause = versus_null(best, float(best["share"]), as_share=True)
        return [Finding("heads", [
            "No head is positional; the closest is ", head_of(best), f": {pct(best['share'])} "
            f"of tokens attend most to {offset_words(offset)}"
            + (f" ({clause})." if clause else ".")], "positional_heads")]
    found = []
    for _, row in chosen.head(3).iterrows():
        offset = int(row["best_offset"])
        beyond, clause = versus_null(row, float(row["share"]), as_share=True)
        if beyond is False:
            found.append(Finding("heads", [
                "", head_of(row), f" passes the positional test ({pct(row['share'])} of tokens "
                f"attend most to {offset_words(offset)}), but {clause}."], "positional_heads"))
            continue
        found.append(Finding("heads", [
            "", head_of(row), f" is a {offset_role(offset)} head: {pct(row['share'])} of "
            f"tokens attend most to {offset_words(offset)}"
            + (f" ({clause})." if clause else ".")], "positional_heads"))
    return found


@finder("heads")
def syntactic_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    best = tables["syntactic_best"]
    rows = best[best["direction"].isin(MAIN_DIRECTIONS) & ~best["relation"].isin(NOT_RELATIONS)]
    if rows.empty:
        return []
    wins = rows[rows["syntactic"].astype(bool)]
    if "tested" in rows.columns and not rows["tested"].astype(bool).any():
        return [Finding("heads", [
            f"Syntactic heads not tested: no relation-direction pair has enough arcs "
            f"({int(rows['examples'].max())} at most); accuracies are illustrations, not "
            "evidence."], "syntactic_best")]
    beyond = [versus_null(r, float(r["accuracy"]))[0] for _, r in wins.iterrows()]
    null_part = (f"; {sum(b is True for b in beyond)} of them beyond the null (above the best "
                 f"head of {SHAPE})" if has_null(rows) else "")
    found = [Finding("heads", [
        f"{len(wins)} of {len(rows)} relation-direction pairs have a syntactic head (clearly "
        f"above the best fixed-offset baseline){null_part}."], "syntactic_best")]
    for _, row in wins.sort_values("examples", ascending=False).head(3).iterrows():
        _, clause = versus_null(row, float(row["accuracy"]), as_share=True)
        found.append(Finding("heads", [
            f"{row['relation']} ({row['direction']}): best head ", head_of(row),
            f", {pct(row['accuracy'])} against a {pct(row['baseline'])} positional baseline "
            f"({int(row['examples'])} arcs)" + (f"; {clause}." if clause else ".")],
            "syntactic_best"))
    return found


@finder("heads")
def rare_word_heads(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    table = tables["rare_words"]
    best = table.sort_values("share_rarest", ascending=False).iloc[0]
    share = (f"{pct(best['share_rarest'])} of words attend most to the sentence's rarest word "
             f"(chance under the model's mask {pct(best['chance_rarest'])})")
    if "tested" in table.columns and not table["tested"].astype(bool).any():
        reason = untested_reason(table, (("words", "min_words", "attending words"),))
        return [Finding("heads", [
            f"Rare-word heads not tested ({reason or 'too little data'}); the closest is ",
            head_of(best), f": {share}, an illustration, not evidence."], "rare_words")]
    beyond, clause = versus_null(best, float(best["share_rarest"]), as_share=True)
    tail = f"; {clause}." if clause else "."
    if bool(best["rare_word"]) and beyond is not False:
        parts: list[str | Head] = ["", head_of(best), f" is a rare-word head: {share}{tail}"]
    elif bool(best["rare_word"]):
        parts = ["", head_of(best), f" passes the rare-word test ({share}), but {clause}."]
    else:
        parts = ["No head is a rare-word head; the closest is ", head_of(best), f": {share}{tail}"]
    return [Finding("heads", parts, "rare_words")]


@finder("heads")
def focus_and_sinks(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    stats = tables["head_stats"]
    confidence = measure(stats, "confidence").sort_values("value", ascending=False).iloc[0]
    entropy = measure(stats, "entropy").sort_values("value", ascending=False).iloc[0]
    _, clause = versus_null(confidence, float(confidence["value"]))
    found = [Finding("heads", [
        "The most focused head is ", head_of(confidence),
        f" (mean maximum weight {num(confidence['value'])}"
        + (f"; {clause}" if clause else "") + "); the broadest is ",
        head_of(entropy), f" (entropy {num(entropy['value'])} nats)."], "head_stats")]
    for name, token in (("to_sep", "[SEP]"), ("to_cls", "[CLS]"), ("sink", "the first token")):
        rows = stats[stats["measure"] == name]
        if rows.empty:  # not computed: 0 by construction for this model
            continue
        if name == "sink" and (stats["measure"] == "to_cls").any():
            continue  # the first token is [CLS]: said once, above
        by_layer = rows.groupby("layer")["value"].mean()
        if by_layer.max() >= 0.3:
            layer = by_layer.idxmax()
            text = (f"Attention parks on {token} in layer {int(layer)}: its heads put "
                    f"{pct(by_layer.max())} of their attention there on average")
            if has_null(rows):
                null_high = rows[rows["layer"] == layer]["null_high"].mean()
                text += (f" ({SHAPE}: {pct(null_high)} at most; "
                         + ("beyond the null)" if by_layer.max() > null_high
                            else "within the null: not learned)"))
            found.append(Finding("heads", [text + "."], "head_stats"))
    return found
