"""The report's summary: main findings written as sentences from the saved tables.

A finder is a function ``tables -> list[Finding]`` registered for a section name with
``@finder("section")``; it reads only the tables (``tables[name]`` raises ``KeyError`` for a
table the run did not write, and the finder is then skipped). A finding's ``parts`` are text
and ``Head(layer, head)`` references, which the page turns into links to the head's card.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

MAIN_DIRECTIONS = ("dep->head", "head->dep")
# The language-model roles (attnlens.measures.lm_heads.tables.LM_ROLES; not imported: the
# findings read saved tables only) and how the text names them.
LM_ROLES = ("induction", "duplicate_token", "previous_token", "sink", "retrieval")
LM_ROLE_WORDS = {"induction": "induction", "duplicate_token": "duplicate-token",
                 "previous_token": "previous-token", "sink": "sink", "retrieval": "retrieval"}
LM_METRIC_WORDS = {"second_repeat_loss": "the second-repeat loss",
                   "perplexity": "the corpus perplexity", "sts_spearman": "the STS score"}
NOT_RELATIONS = ("all relations", "punct")


@dataclass(frozen=True)
class Head:
    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.layer}-{self.head}"


@dataclass
class Finding:
    """One sentence of the summary; ``section`` is the section it links to."""

    section: str
    parts: list[str | Head] = field(default_factory=list)
    table: str = ""

    def text(self) -> str:
        return "".join(str(p) for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        parts = [[p.layer, p.head] if isinstance(p, Head) else p for p in self.parts]
        return {"section": self.section, "parts": parts, "table": self.table}


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


def trend(first: float, last: float, tolerance: float = 0.02) -> str:
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays near"


# Head roles ---------------------------------------------------------------------------------
@finder("heads")
def role_counts(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    roles = tables["head_roles"]["roles"].fillna("none").astype(str).str.split("; ")
    count = {r: int(roles.apply(lambda found, r=r: r in found).sum())
             for r in ("positional", "syntactic", "rare-word", *LM_ROLES)}
    with_role = int((roles.str.join("; ") != "none").sum())
    lm = ", ".join(f"{count[r]} {LM_ROLE_WORDS[r]}" for r in LM_ROLES if count[r])
    return [Finding("heads", [
        f"{with_role} of {len(roles)} heads have a role: {count['positional']} positional, "
        f"{count['syntactic']} syntactic, {count['rare-word']} rare-word"
        + (f"; language-model roles: {lm}." if lm else ".")], "head_roles")]


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


# Heads of language models --------------------------------------------------------------------
@finder("lm_heads")
def lm_roles(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Each language-model role's heads (tested), with scores and intervals."""
    tests = tables["role_tests"] if "role_tests" in tables else tables["lm_role_tests"]
    found = []
    for role in LM_ROLES:
        rows = tests[tests["role"] == role]
        if rows.empty:
            continue
        won = rows[rows["passed"].astype(bool)].sort_values("value", ascending=False)
        word = LM_ROLE_WORDS[role]
        if won.empty:
            best = rows.sort_values("value", ascending=False).iloc[0]
            found.append(Finding("lm_heads", [
                f"No {word} head; the highest score is ", head_of(best),
                f"'s ({num(best['value'])} against the threshold {num(best['reference'])})."],
                "role_tests"))
            continue
        parts: list[str | Head] = [f"{len(won)} {word} head{'s' if len(won) > 1 else ''}: "]
        for i, (_, row) in enumerate(won.head(4).iterrows()):
            interval = ("" if pd.isna(row["ci_low"])
                        else f" [{num(row['ci_low'])}, {num(row['ci_high'])}]")
            parts += [", " if i else "", head_of(row), f" ({num(row['value'])}{interval})"]
        parts.append(f"{' and more' if len(won) > 4 else ''} (threshold "
                     f"{num(won['reference'].iloc[0])}).")
        found.append(Finding("lm_heads", parts, "role_tests"))
    return found


@finder("lm_heads")
def sink_rate(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    sinks = measure(tables["head_stats"], "sink")
    top = sinks.sort_values("value", ascending=False).iloc[0]
    return [Finding("lm_heads", [
        f"Sink-rate {pct((sinks['value'] > 0.3).mean())}: heads putting more than 0.3 of their "
        "attention on the first token (Gu et al.); the strongest sink is ", head_of(top),
        f" ({num(top['value'])})."], "head_stats")]


@finder("lm_heads")
def role_ablations(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    found = []
    for row in tables["role_ablation"].itertuples():
        role, what = LM_ROLE_WORDS.get(row.role, row.role), LM_METRIC_WORDS.get(row.metric,
                                                                              row.metric)
        heads = f"the {role} head" if row.k == 1 else f"the {row.k} {role} heads"
        verb = "raises" if row.ablated >= row.baseline else "lowers"
        text = f"Ablating {heads} {verb} {what} from {num(row.baseline)} to {num(row.ablated)}"
        if row.n_random:
            sets = {1: "heads", 2: "pairs"}.get(row.k, f"sets of {row.k}")
            verdict = ("beyond random heads" if row.p <= 0.05 else
                       "no more than random heads do")
            text += (f"; {row.n_random} random {sets}: {num(row.random_low)}-"
                     f"{num(row.random_high)} (p = {row.p:.2g}, {verdict}).")
        else:
            text += " (no random control: too few other heads)."
        found.append(Finding("lm_heads", [text], "role_ablation"))
    return found


@finder("lm_heads")
def kv_savings(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    kv = tables["kv_cache"].iloc[0]
    streaming = tables["streaming_heads"]
    if streaming["output_error"].isna().all():
        return []
    return [Finding("lm_heads", [
        f"{int(kv['streaming_kv_heads'])} of {int(kv['kv_heads'])} key/value heads are "
        f"streaming (the first {int(streaming['sink_tokens'].iloc[0])} tokens and the last "
        f"{int(streaming['window'].iloc[0])} suffice); full caches for the others only would "
        f"take {num(kv['ratio'])}x less KV memory at {int(kv['context'])} tokens "
        f"({pct(kv['reduction'])} less; DuoAttention reports up to 2.55x for MHA, 1.67x for "
        "GQA; RazorAttention more than 70 %)."], "kv_cache")]


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
    found = [Finding("spectrum", [
        f"{lead}: C(n/4) {change} {num(first)} in layer {int(by_layer.index[0])} {link} "
        f"{num(last)} in layer {int(by_layer.index[-1])} (mean over heads)."],
        "spectrum_summary")]
    top = quarter.sort_values("value", ascending=False).iloc[0]
    found.append(Finding("spectrum", [
        "The most low-rank head is ", head_of(top), f": its top quarter of singular values "
        f"holds {pct(top['value'])} of their sum."], "spectrum_summary"))
    return found


@finder("spectrum")
def shared_subspace(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    dims = tables["shared_subspace_dims"]
    rows = dims[(dims["matrix"] == "W_QK") & np.isclose(dims["energy"], 0.9)]
    concat = rows[rows["scope"] == "concat"]["dims"]
    summed = rows[rows["scope"] == "sum_of_heads"]["dims"]
    if concat.empty or summed.empty:
        return []
    d_model = int(rows["d_model"].iloc[0])
    return [Finding("spectrum", [
        f"The heads of a layer share their query/key subspace: 90 % of the stacked "
        f"W_Q W_K^T energy fits in {int(concat.min())}-{int(concat.max())} of {d_model} "
        f"dimensions, against {int(summed.min())}-{int(summed.max())} if the heads' subspaces "
        "were orthogonal."], "shared_subspace_dims")]


# Asymmetry ----------------------------------------------------------------------------------
@finder("asymmetry")
def asymmetry(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    weights = measure(tables["weight_asymmetry"], "antisym_share")["value"]
    found = [Finding("asymmetry", [
        f"On average {pct(weights.mean())} of each head's ||W_Q W_K^T||² is antisymmetric "
        f"(heads range {pct(weights.min())} to {pct(weights.max())})."], "weight_asymmetry")]
    if "pattern_asymmetry" in tables and "asymmetry_baseline" in tables:
        heads = measure(tables["pattern_asymmetry"], "asym_ratio")["value"].mean()
        base = measure(tables["asymmetry_baseline"], "asym_ratio")["value"].mean()
        ratio = f"{heads / base:.1f} times as" if base > 0 else "more"
        found.append(Finding("asymmetry", [
            f"Learned attention is {ratio} asymmetric as symmetric-logit self-attention on the "
            f"same inputs: ||P - P^T|| / ||P|| is {num(heads)} against {num(base)}."],
            "pattern_asymmetry"))
        top = measure(tables["pattern_asymmetry"], "asym_ratio").sort_values(
            "value", ascending=False).iloc[0]
        found.append(Finding("asymmetry", [
            "The most one-way head is ", head_of(top),
            f" (||P - P^T|| / ||P|| = {num(top['value'])})."], "pattern_asymmetry"))
    return found


# Rank collapse ------------------------------------------------------------------------------
@finder("collapse")
def collapse(tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
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
            "Without skip connections the model's attention collapses towards rank one: the "
            f"relative residual of pure attention {where}{tail}."], "collapse_variants"))
    if "path_collapse" in tables and not tables["path_collapse"].empty:
        paths = tables["path_collapse"].sort_values("path_length")
        one, last = paths.iloc[0], paths.iloc[-1]
        found.append(Finding("collapse", [
            "Attention products along paths of heads approach rank one: their rank-1 residual "
            f"falls from {num(one['geo_mean'])} (one head) to {num(last['geo_mean'])} "
            f"({int(last['path_length'])} heads)."], "path_collapse"))
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
