"""Report section "Heads of language models": probes, sinks, copying, retrieval, the KV-cache
view and the causal checks, with their evidence and controls (``LmHeads`` computes them)."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.lm_heads.run import LmHeads, LmHeadsResult
from attnlens.measures.lm_heads.sinks import SINK_EPSILON
from attnlens.measures.lm_heads.tables import LM_ROLES, ROLE_THRESHOLDS
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_head_heatmap
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import DUO, ELHAGE, GU, OLSSON, RAZOR, WU, XIAO
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

# Published KV-cache savings the summary quotes beside this model's (docs/lm-heads.md).
PUBLISHED_KV = ("DuoAttention reports up to 2.55x less KV memory for MHA models and 1.67x "
                "for GQA models; RazorAttention more than 70 % less")

LM_HEADS = SectionDoc(
    about=(
        "The heads language-model research names, each a tested claim. On synthetic probes "
        "[first token] + R + R (random ordinary tokens, R twice), over the second repeat's "
        "queries i: previous_token = attention to i-1, duplicate_token = to i-R (the earlier "
        "copy), induction = to i-R+1 (the token after it). sink = Gu et al.'s first-token "
        "attention on the corpus. retrieval = how often a head's most-attended key is the "
        "needle token the answer copies (teacher-forced haystacks). copying = the share of the "
        "OV circuit's eigenvalue magnitude with a positive real part. A head is streaming "
        "when keeping only the first sink tokens and a recent window changes its output by "
        "less than the threshold; ablating a role's heads is compared with ablating as many "
        "random heads of the same layers."
    ),
    papers=(OLSSON, ELHAGE, XIAO, GU, WU, DUO, RAZOR),
    command="attnlens heads",
    tables=(
        TableDoc("probe_scores", "Per head: previous_token, duplicate_token, induction "
                 "(probes), retrieval (haystacks) with 95 % bootstrap intervals over "
                 "sequences, and the OV copying scores (weights: no interval).",
                 pivot=("measure", "value")),
        TableDoc("streaming_heads", "Relative output error under the sink + window "
                 "restriction (the largest of the corpus and the long probes) and whether "
                 "each key/value head is streaming."),
        TableDoc("kv_cache", "KV-cache memory if only non-streaming key/value heads keep a "
                 "full cache, at --context tokens."),
        TableDoc("role_ablation", "Each role's heads ablated against --controls sets of as "
                 "many random heads from the same layers: metric, range of the controls and "
                 "the permutation p-value."),
        TableDoc("sink_keys", "Per layer, the tokens most often among the 3 keys that "
                 "receive the most attention in a sentence (first token or another)."),
        TableDoc("lm_role_tests", "The language-model roles tested against their thresholds "
                 "(when the head-roles section does not list them)."),
    ),
    figures=(
        FigureDoc("lm_induction", "Induction score: attention to the token after the earlier "
                  "copy (probes)."),
        FigureDoc("lm_previous_token", "Previous-token score (probes)."),
        FigureDoc("lm_duplicate_token", "Duplicate-token score (probes)."),
        FigureDoc("lm_retrieval", "Retrieval score (teacher-forced haystacks)."),
        FigureDoc("lm_sink", "First-token (sink) attention on the corpus."),
        FigureDoc("lm_copying", "OV copying score (share of eigenvalue magnitude with a "
                  "positive real part)."),
        FigureDoc("lm_streaming_error", "Relative output error when restricted to the sink "
                  "tokens and the recent window."),
    ),
    card=(
        CardItem("probe_scores", "Language-model probes", kind="measures"),
        CardItem("streaming_heads", "KV-cache view", kind="row",
                 columns=("kv_head", "output_error", "streaming")),
    ),
)
FIGURES = {"induction": "Induction score (probes)",
           "previous_token": "Previous-token score (probes)",
           "duplicate_token": "Duplicate-token score (probes)",
           "retrieval": "Retrieval score (haystacks)", "copying": "OV copying score"}
ROLE_WORDS = {"induction": "induction", "duplicate_token": "duplicate-token",
              "previous_token": "previous-token", "sink": "sink", "retrieval": "retrieval"}
METRIC_WORDS = {"second_repeat_loss": "the second-repeat loss",
                "perplexity": "the corpus perplexity", "sts_spearman": "the STS Spearman score"}


class LmHeadsSection(Section):
    """The report section of ``LmHeads`` (see the module docstring)."""

    name = "lm_heads"
    title = "Heads of language models"
    doc = LM_HEADS

    def __init__(self, lm: LmHeads | None = None) -> None:
        self.lm = lm or LmHeads()
        self.roles_elsewhere = False  # the head-roles section lists the roles' tests

    def analyzers(self, model: HookedTransformer, tokenizer) -> list:
        return self.lm.corpus_analyzers(model, tokenizer)

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        result = self.lm.compute(model)
        tables = dict(result.tables)
        if not self.roles_elsewhere and not result.role_tests.empty:
            tables["lm_role_tests"] = result.role_tests
        for name, table in tables.items():
            write_table(table, out_dir, name)
        output = SectionOutput(self.title, tables=tables)
        for name, fig in figures(tables, result.sink_rows):
            output.figures += save_figure(fig, out_dir, name, formats)
        output.notes = notes(result, self.lm)
        output.summary = "\n".join(output.notes)
        return output


def figures(tables: dict[str, pd.DataFrame], sinks: pd.DataFrame | None) -> list:
    """(name, recipe) pairs drawn from the tables only."""
    found = []
    scores = tables["probe_scores"]
    for measure, title in FIGURES.items():
        rows = scores[scores["measure"] == measure]
        if not rows.empty:
            found.append((f"lm_{measure}", partial(layer_head_heatmap, rows, title,
                                                   vmin=0, vmax=1)))
    if sinks is not None and not sinks.empty:
        found.append(("lm_sink", partial(layer_head_heatmap, sinks,
                                         "First-token (sink) attention", vmin=0, vmax=1)))
    streaming = tables["streaming_heads"]
    if streaming["output_error"].notna().any():
        found.append(("lm_streaming_error", partial(
            layer_head_heatmap, streaming, "Output error: sink tokens + recent window",
            value="output_error", vmin=0)))
    return found


def _score(row) -> str:
    interval = "" if pd.isna(row["ci_low"]) else f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    return f"L{int(row['layer'])}H{int(row['head'])} ({row['value']:.2f}{interval})"


def role_lines(tests: pd.DataFrame, alpha: float, tested_how: str) -> list[str]:
    """One line per role: its heads with scores and intervals, or the closest head."""
    lines = []
    for role in LM_ROLES:
        rows = tests[tests["role"] == role]
        if rows.empty:
            continue
        word, threshold = ROLE_WORDS[role], ROLE_THRESHOLDS[role]
        won = rows[rows["passed"].astype(bool)].sort_values("value", ascending=False)
        if not rows["tested"].any() and tested_how != "point":
            best = rows.sort_values("value", ascending=False).iloc[0]
            lines.append(f"{word.capitalize()} heads not tested ({int(best['n_sentences'])} "
                         f"sequences, {int(best['n_examples'])} examples: too few); highest "
                         f"{_score(best)}.")
        elif won.empty:
            best = rows.sort_values("value", ascending=False).iloc[0]
            lines.append(f"No {word} head (score > {threshold:.2f}, {tested_how}); highest "
                         f"{_score(best)}.")
        else:
            shown = ", ".join(_score(r) for _, r in won.head(6).iterrows())
            more = f" and {len(won) - 6} more" if len(won) > 6 else ""
            lines.append(f"{word.capitalize()} heads (score > {threshold:.2f}, {tested_how}): "
                         f"{shown}{more}.")
    return lines


def ablation_lines(ablation: pd.DataFrame, alpha: float = 0.05) -> list[str]:
    """'Ablating the 2 induction heads raises ...; 20 random pairs ...: lo-hi (p = ...)' per
    row, and whether the role matters causally beyond random heads of the same layers."""
    lines = []
    for row in ablation.itertuples():
        what = METRIC_WORDS.get(row.metric, row.metric)
        role = ROLE_WORDS.get(row.role, row.role)
        heads = f"the {role} head" if row.k == 1 else f"the {row.k} {role} heads"
        sets = {1: "heads", 2: "pairs"}.get(row.k, f"sets of {row.k} heads")
        verb = "raises" if row.ablated >= row.baseline else "lowers"
        line = f"Ablating {heads} {verb} {what} from {row.baseline:.4g} to {row.ablated:.4g}"
        if not row.n_random:
            lines.append(f"{line}; no random control possible (no other heads).")
            continue
        line += (f"; {row.n_random} random {sets} from the same layers: "
                 f"{row.random_low:.4g}-{row.random_high:.4g} (p = {row.p:.2g})")
        worse_is_higher = row.metric != "sts_spearman"
        helped = (row.ablated < row.random_low) if worse_is_higher else (
            row.ablated > row.random_high)
        if row.p <= alpha:
            lines.append(f"{line}: the {role} role matters causally beyond random heads.")
        elif helped:
            lines.append(f"{line}: removing them helps this metric more than any random set "
                         "(the heads work against it).")
        else:
            lines.append(f"{line}: the {role} role does not matter causally beyond random "
                         "heads.")
    return lines


def notes(result: LmHeadsResult, lm: LmHeads) -> list[str]:
    """The section's key figures as sentences (the console summary and the page's notes)."""
    s, facts, inference = lm.settings, result.facts, lm.inference
    lines = []
    if s.probes:
        source = (f"--probe-file ({facts.get('probes')} sequences)" if s.probe_file
                  else f"{facts.get('probes')} random sequences, seed {s.probe_seed}")
        lines.append(f"Probes: [first token] + R + R with R = "
                     f"{'/'.join(map(str, facts.get('repeat', [])))}, {source}; "
                     f"{facts.get('haystacks')} haystacks of {facts.get('haystack_tokens')} "
                     f"tokens with a {facts.get('needle')}-token needle (layers and heads "
                     "from 0).")
    else:
        lines.append("Probes off (--no-probes): no previous-token, duplicate-token, induction "
                     "or retrieval scores; sinks, copying and streaming on the corpus only.")
    tested_how = (f"q < {inference.alpha}, {inference.correction.upper()}-corrected over the "
                  "heads" if inference.bootstrap else "point")
    lines += role_lines(result.role_tests, inference.alpha, tested_how)
    sinks = result.sink_rows
    if sinks is not None and not sinks.empty:
        above = int((sinks["value"] > SINK_EPSILON).sum())
        lines.append(f"Sink-rate (Gu et al.): {100 * result.sink_rate:.1f} % of heads ({above} "
                     f"of {len(sinks)}) put more than {SINK_EPSILON} of their attention on the "
                     "first token (mean over sentences).")
    keys = result.tables["sink_keys"]
    others = keys[keys["position"] == "other"].sort_values("n_top", ascending=False)
    if not others.empty:
        top = others.head(3)
        shown = ", ".join(f"{t!r} (layer {int(la)}, {100 * sh:.0f} % of sentence-heads)"
                          for t, la, sh in zip(top["token"], top["layer"],
                                               top["share_of_heads"], strict=True))
        lines.append(f"Besides the first token, the keys most often among a sentence's 3 "
                     f"most-attended: {shown}.")
    form = facts.get("copying_form")
    if form is None:
        lines.append(f"No copying scores: {facts.get('copying_missing')}.")
    else:
        lines.append("Copying scores from W_U W_OV W_E (the LM head's unembedding)." if
                     form == "unembedding" else "Copying scores from W_E^T W_OV W_E (the "
                     "model has no unembedding: outputs read against the token embeddings).")
    lines += streaming_lines(result.tables["streaming_heads"], result.tables["kv_cache"],
                             s, facts)
    ablation = result.tables["role_ablation"]
    if not ablation.empty:
        lines += ablation_lines(ablation, inference.alpha)
    elif not facts.get("metrics"):
        lines.append("No causal check: it needs a causal LM head (second-repeat loss, "
                     "perplexity) or, for a sentence encoder, --sts-data (STS Spearman).")
    else:
        lines.append("No causal check: no head has a language-model role.")
    return lines


def streaming_lines(streaming: pd.DataFrame, kv: pd.DataFrame, s, facts: dict) -> list[str]:
    if streaming["output_error"].isna().all():
        return [f"Streaming heads not measured: no corpus sentence or probe is longer than "
                f"{s.sink_tokens} sink tokens + a {s.window}-token window."]
    per_kv = streaming.groupby(["layer", "kv_head"])["streaming"].first()
    row = kv.iloc[0]
    lines = [f"{int(per_kv.sum())} of {len(per_kv)} key/value heads are streaming (output "
             f"error < {s.streaming_threshold} with the first {s.sink_tokens} tokens and the "
             f"last {s.window}; largest of the corpus and {facts.get('long_probes', 0)} long "
             f"probes with R = {facts.get('long_repeat', 'n/a')})."]
    repeat = facts.get("long_repeat")
    if repeat is not None and repeat <= s.window:
        lines.append(f"The model's positions allow long probes of R = {repeat} only, within "
                     f"the {s.window}-token window: retrieval-like heads cannot show an error "
                     "there; use a smaller --window.")
    ratio = row["ratio"]
    lines.append(f"Full KV caches only for the others at {int(row['context'])} tokens: "
                 f"{'inf' if math.isinf(ratio) else f'{ratio:.2f}'}x less KV memory "
                 f"({100 * row['reduction']:.1f} % less). {PUBLISHED_KV}.")
    return lines
