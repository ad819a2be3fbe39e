"""Findings of the language-model heads (the report's summary sentences), from saved tables:
each role's tested heads, the Sink-rate, the causal checks against random heads and the
KV-cache view (``attnlens.measures.findings`` has the types and wording helpers)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from attnlens.measures.findings import Finding, Head, finder, head_of, measure, num, pct

# The language-model roles (attnlens.measures.lm_heads.tables.LM_ROLES; not imported: the
# findings read saved tables only) and how the text names them.
LM_ROLES = ("induction", "duplicate_token", "previous_token", "sink", "retrieval")
LM_ROLE_WORDS = {"induction": "induction", "duplicate_token": "duplicate-token",
                 "previous_token": "previous-token", "sink": "sink", "retrieval": "retrieval"}
LM_METRIC_WORDS = {"second_repeat_loss": "the second-repeat loss",
                   "perplexity": "the corpus perplexity", "sts_spearman": "the STS score"}
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
