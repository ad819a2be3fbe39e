"""The report's summary: main findings written as sentences from the saved tables.

A finder is a function ``tables -> list[Finding]`` registered for a section name with
``@finder("section")``; it reads only the tables (``tables[name]`` raises ``KeyError`` for a
table the run did not write, and the finder is then skipped). A finding's ``parts`` are text
and ``Head(layer, head)`` references (written ``L2H8``), which the page turns into links to
the head's card.

Findings are held to the null model when the tables carry its columns (``null_mean``,
``null_low``, ``null_high``: a randomly initialised copy of the model, ``--null
random-init``): a result is stated as "beyond the null" only when it lies beyond the null's
95 % bound, and otherwise the sentence says that any model of this shape gives as much.
Results that theory guarantees for every model of the architecture (pure attention
collapses to rank one without skip connections) are ``kind="theory"`` and shown apart.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

MAIN_DIRECTIONS = ("dep->head", "head->dep")
NOT_RELATIONS = ("all relations", "punct")


@dataclass(frozen=True)
class Head:
    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"


@dataclass
class Finding:
    """One sentence of the summary; ``section`` is the section it links to."""

    section: str
    parts: list[str | Head] = field(default_factory=list)
    table: str = ""
    kind: str = "finding"  # or "theory": true of any model of the architecture

    def text(self) -> str:
        return "".join(str(p) for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        parts = [[p.layer, p.head] if isinstance(p, Head) else p for p in self.parts]
        return {"section": self.section, "parts": parts, "table": self.table,
                "kind": self.kind}


Finder = Callable[[Mapping[str, pd.DataFrame]], list[Finding]]
FINDERS: dict[str, list[Finder]] = {}


def finder(section: str) -> Callable[[Finder], Finder]:
    """Register ``fn`` as a source of findings for the section named ``section``."""

    def register(fn: Finder) -> Finder:
        FINDERS.setdefault(section, []).append(fn)
        return fn

    return register


def find_all(sections: list[str], tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Every registered finder of ``sections`` (in that order) run on ``tables``."""
    found: list[Finding] = []
    for section in sections:
        for fn in FINDERS.get(section, []):
            try:
                found += fn(tables)
            except KeyError:
                continue  # a table this run did not write
            except (ValueError, IndexError, TypeError) as exc:  # a table of another shape
                warnings.warn(f"finding {fn.__name__} skipped: {exc}", stacklevel=2)
    return found


# Helpers ------------------------------------------------------------------------------------
def pct(share: float) -> str:
    """0.998 -> '99.8 %'; shares just below 1 keep the digits that show they are not 1."""
    value = 100 * float(share)
    if 99.95 <= value < 100:
        return f"{value:.3f}".rstrip("0") + " %"
    return f"{value:.1f} %"


def num(value: float) -> str:
    """Three significant digits (four just below 1), exponents for tiny or huge values."""
    value = float(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.2g}"
    if 0.999 <= abs(value) < 1:
        return f"{value:.4g}"
    return f"{value:.3g}"


def head_of(row: Any) -> Head:
    return Head(int(row["layer"]), int(row["head"]))


def measure(table: pd.DataFrame, name: str) -> pd.DataFrame:
    rows = table[table["measure"] == name]
    if rows.empty:
        raise KeyError(name)
    return rows


def offset_words(offset: int) -> str:
    names = {-1: "the previous token", 1: "the next token", 0: "the token itself"}
    if offset in names:
        return names[offset]
    side = "left" if offset < 0 else "right"
    return f"the token {abs(offset)} to the {side}"


def offset_role(offset: int) -> str:
    names = {-1: "previous-token", 1: "next-token", 0: "self"}
    return names.get(offset, f"offset {offset:+d}")


SHAPE = "a randomly initialised model of this shape"


def has_null(rows: pd.DataFrame | pd.Series) -> bool:
    """True when the rows carry the null model's columns with values."""
    if isinstance(rows, pd.Series):
        return "null_high" in rows.index and not pd.isna(rows["null_high"])
    return "null_high" in rows.columns and bool(rows["null_high"].notna().any())


def versus_null(row: pd.Series, value: float, fmt=None, higher: bool = True,
                as_share: bool = False) -> tuple[bool | None, str]:
    """(beyond the null?, a clause saying so) for one row's ``value``; (None, "") without a
    null. ``higher``: large values are the notable ones (else small ones)."""
    if not has_null(row):
        return None, ""
    show = fmt or (pct if as_share else num)
    high, low = float(row["null_high"]), float(row.get("null_low", row["null_high"]))
    if higher:
        if value > high:
            return True, f"beyond the null: 95 % of the heads of {SHAPE} stay below {show(high)}"
        return False, (f"within the null: {SHAPE} gives as much (up to {show(high)}), so this "
                       "does not show learned structure")
    if value < low:
        return True, f"beyond the null: 95 % of the heads of {SHAPE} stay above {show(low)}"
    return False, (f"within the null: {SHAPE} gives as little (down to {show(low)}), so this "
                   "does not show learned structure")


def untested_reason(table: pd.DataFrame, counts: tuple[tuple[str, str, str], ...]) -> str:
    """"4 sentences < 20" for the first (count column, minimum column, noun) that falls
    short, from a table's own columns; "" when none does or the columns are absent."""
    for count, minimum, noun in counts:
        if count in table.columns and minimum in table.columns:
            have, need = int(table[count].iloc[0]), int(table[minimum].iloc[0])
            if have < need:
                return f"{have} {noun} < {need}"
    return ""


def trend(first: float, last: float, tolerance: float = 0.02) -> str:
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays near"


# Head roles ---------------------------------------------------------------------------------
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


# Spectrum -----------------------------------------------------------------------------------
@finder("spectrum")
def rank_with_depth(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    quarter = measure(tables["spectrum_summary"], "cum_at_quarter")
    by_layer = quarter.groupby("layer")["value"].mean()
    first, last = float(by_layer.iloc[0]), float(by_layer.iloc[-1])
    word = trend(first, last)
    lead = ("Attention becomes lower-rank with depth" if word == "rises"
            else "Attention becomes higher-rank with depth" if word == "falls"
            else "Attention is about as low-rank in every layer")
    change = f"{word} from" if word != "stays near" else "is"
    link = "to" if word != "stays near" else "and"
    text = (f"{lead}: C(n/4) {change} {num(first)} in layer {int(by_layer.index[0])} {link} "
            f"{num(last)} in layer {int(by_layer.index[-1])} (mean over heads)")
    if has_null(quarter):
        null = quarter.groupby("layer")[["null_mean", "null_high"]].mean()
        n_first, n_last = float(null["null_mean"].iloc[0]), float(null["null_mean"].iloc[-1])
        above = [layer for layer, v in by_layer.items() if v > null["null_high"].get(layer, 1)]
        text += (f"; {SHAPE} gives {num(n_first)} and {num(n_last)}: "
                 + (f"beyond the null in {len(above)} of {len(by_layer)} layers" if above
                    else "within the null in every layer, so the shape, not training, sets it"))
    found = [Finding("spectrum", [text + "."], "spectrum_summary")]
    top = quarter.sort_values("value", ascending=False).iloc[0]
    _, clause = versus_null(top, float(top["value"]), as_share=True)
    found.append(Finding("spectrum", [
        "The most low-rank head is ", head_of(top), f": its top quarter of singular values "
        f"holds {pct(top['value'])} of their sum" + (f" ({clause})." if clause else ".")],
        "spectrum_summary"))
    return found


@finder("spectrum")
def shared_subspace(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    dims = tables["shared_subspace_dims"]
    rows = dims[(dims["matrix"] == "W_QK") & np.isclose(dims["energy"], 0.9)]
    concat = rows[rows["scope"] == "concat"]
    summed = rows[rows["scope"] == "sum_of_heads"]["dims"]
    if concat.empty or summed.empty:
        return []
    d_model = int(rows["d_model"].iloc[0])
    text = (f"The heads of a layer share their query/key subspace: 90 % of the stacked "
            f"W_Q W_K^T energy fits in {int(concat['dims'].min())}-{int(concat['dims'].max())} "
            f"of {d_model} dimensions, against {int(summed.min())}-{int(summed.max())} if the "
            "heads' subspaces were orthogonal")
    if has_null(concat):
        low = concat["null_low"]
        fewer = int((concat["dims"] < low).sum())
        text += (f"; {SHAPE} needs {int(low.min())}-{int(concat['null_high'].max())}: "
                 + (f"beyond the null in {fewer} of {len(concat)} layers" if fewer
                    else "within the null, so any model of this shape shares as much"))
    return [Finding("spectrum", [text + "."], "shared_subspace_dims")]


# Asymmetry ----------------------------------------------------------------------------------
@finder("asymmetry")
def asymmetry(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    rows = measure(tables["weight_asymmetry"], "antisym_share")
    weights = rows["value"]
    text = (f"On average {pct(weights.mean())} of each head's ||W_Q W_K^T||² is antisymmetric "
            f"(heads range {pct(weights.min())} to {pct(weights.max())})")
    if has_null(rows):
        outside = int(((weights > rows["null_high"]) | (weights < rows["null_low"])).sum())
        text += (f"; {SHAPE}: {pct(rows['null_mean'].mean())} on average, {outside} of "
                 f"{len(rows)} heads beyond its 95 % range")
    found = [Finding("asymmetry", [text + "."], "weight_asymmetry")]
    if "pattern_asymmetry" in tables and "asymmetry_baseline" in tables:
        pattern = measure(tables["pattern_asymmetry"], "asym_ratio")
        heads = pattern["value"].mean()
        base = measure(tables["asymmetry_baseline"], "asym_ratio")["value"].mean()
        ratio = f"{heads / base:.1f} times as" if base > 0 else "more"
        text = (f"Learned attention is {ratio} asymmetric as symmetric-logit self-attention on "
                f"the same inputs: ||P - P^T|| / ||P|| is {num(heads)} against {num(base)}")
        if has_null(pattern):
            text += f"; {SHAPE}: {num(pattern['null_mean'].mean())}"
        found.append(Finding("asymmetry", [text + "."], "pattern_asymmetry"))
        top = pattern.sort_values("value", ascending=False).iloc[0]
        _, clause = versus_null(top, float(top["value"]))
        found.append(Finding("asymmetry", [
            "The most one-way head is ", head_of(top),
            f" (||P - P^T|| / ||P|| = {num(top['value'])}" + (f"; {clause})." if clause
                                                              else ").")],
            "pattern_asymmetry"))
    return found


# Rank collapse ------------------------------------------------------------------------------
@finder("collapse")
def collapse(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Both statements are guaranteed by theory for any model of the architecture (Dong et
    al. 2021: pure self-attention loses rank doubly exponentially with depth; a product of
    row-stochastic matrices tends to rank one), so they are ``kind="theory"``."""
    curves = tables["collapse_variants"]
    curves = curves[curves["norm"] == "composite"]
    found = []
    san = curves[curves["variant"] == "san"].sort_values("depth")
    full = curves[curves["variant"] == "full"].sort_values("depth")
    if not san.empty:
        below = san[san["geo_mean"] < 1e-13]["depth"]
        where = (f"reaches rounding noise (< 1e-13) by depth {int(below.min())}" if len(below)
                 else f"falls to {num(san['geo_mean'].iloc[-1])} by depth "
                 f"{int(san['depth'].iloc[-1])}")
        tail = (f"; the full model keeps it above {num(full['geo_mean'].min())} at every depth"
                if not full.empty else "")
        found.append(Finding("collapse", [
            "Without skip connections attention collapses towards rank one (Dong et al. 2021: "
            "true of any model of this shape): the relative residual of pure attention "
            f"{where}{tail}."], "collapse_variants", kind="theory"))
    if "path_collapse" in tables and not tables["path_collapse"].empty:
        paths = tables["path_collapse"].sort_values("path_length")
        one, last = paths.iloc[0], paths.iloc[-1]
        found.append(Finding("collapse", [
            "Products of attention matrices along paths of heads approach rank one (a product "
            "of row-stochastic matrices does, whatever the weights): their rank-1 residual "
            f"falls from {num(one['geo_mean'])} (one head) to {num(last['geo_mean'])} "
            f"({int(last['path_length'])} heads)."], "path_collapse", kind="theory"))
    return found


# Pruning ------------------------------------------------------------------------------------
@finder("prune")
def pruning(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    importance = tables["head_importance"].sort_values("score", ascending=False)
    found = [Finding("prune", [
        "The most important head for the pruning metric is ", head_of(importance.iloc[0]),
        "; the least important is ", head_of(importance.iloc[-1]), "."], "head_importance")]
    curve = tables.get("prune_curve")
    if curve is not None:
        rows = curve[(curve["order"] == "importance") & (curve["seed"] == curve["seed"].min())]
        if len(rows) > 1:
            half = rows.iloc[(rows["fraction_pruned"] - 0.5).abs().argsort().iloc[0]]
            start = rows.sort_values("step").iloc[0]
            found.append(Finding("prune", [
                f"Pruning {int(half['n_pruned'])} heads ({pct(half['fraction_pruned'])}) by "
                f"importance moves the metric from {num(start['metric'])} to "
                f"{num(half['metric'])} ({half['change']:+.3g})."], "prune_curve"))
    return found
