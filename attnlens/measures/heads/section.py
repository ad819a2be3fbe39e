"""Report section: head roles (positional, syntactic, rare-word) as tested claims, Clark's
statistics with intervals, held-out best heads, behaviour classes and head clustering."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.data.batch import Batch
from attnlens.data.corpus import Corpus
from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext
from attnlens.measures.heads.behaviour import HeadBehaviour
from attnlens.measures.heads.clustering import HeadClustering
from attnlens.measures.heads.examples import HeadExamples
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.heads.head_stats_tables import head_stats_table
from attnlens.measures.heads.positional import MIN_SENTENCES, PositionalHeads
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.roles import (
    ROLES,
    classify_heads,
    role_counts,
    role_evidence,
    role_tests,
)
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.measures.heads.syntactic_arcs import DEFAULT_MIN_EXAMPLES, MAIN_DIRECTIONS
from attnlens.measures.heads.syntactic_tables import held_out_selection
from attnlens.measures.lm_heads.sinks import SinkScores
from attnlens.measures.lm_heads.tables import original_numbers, sink_rows
from attnlens.model.head_ids import head_ids_of, renumber_heads, renumber_tables
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import (
    behaviour_figure,
    head_distance_figure,
    head_embedding_figure,
    layer_head_heatmap,
    relation_heatmaps,
    role_map_figure,
)
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import CLARK, VOITA
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import markdown_table, save_figure, write_table
from attnlens.stats.bootstrap import Inference

MAIN_DIRECTION_ROWS = (("direction", ("dep->head", "head->dep")),)
HEADS = SectionDoc(
    about=(
        "Clark et al.'s per-head statistics (how peaked each head's attention is, how much "
        "goes to [CLS], [SEP], punctuation and the neighbouring tokens; causal models: to the "
        "first token instead, and nothing that is 0 by construction) and the roles Voita "
        "et al. found heads to play. A positional head sends most tokens' strongest attention "
        "to one fixed offset; a syntactic head points from a word to its dependency head (or "
        "dependent) clearly more often than the best fixed-offset guess; a rare-word head "
        "attends to the sentence's rarest word. Statistics are over tokens, roles over words."
    ),
    papers=(CLARK, VOITA),
    command="attnlens heads",
    tables=(
        TableDoc("head_roles", "One row per head: its tested roles (q < alpha after the "
                 "multiple-testing correction) or none, and the evidence."),
        TableDoc("role_tests", "Every candidate role tested: estimate, 95 % bootstrap interval "
                 "over sentences, what it is compared to, p-value and corrected q-value."),
        TableDoc("role_evidence", "One row per head and tested role found, with what it beat."),
        TableDoc("head_roles_uncorrected", "Roles by the uncorrected point rules (share >= "
                 "threshold; accuracy >= baseline + margin), for comparison with earlier work."),
        TableDoc("role_evidence_uncorrected", "Evidence of the uncorrected roles."),
        TableDoc("head_stats", "Token-level statistics, one row per layer, head and measure "
                 "(sink: attention to the first token, pooled per sentence; Gu et al.).",
                 pivot=("measure", "value")),
        TableDoc("head_examples", "The corpus sentences where each head shows each behaviour "
                 "most (top 3 per head and measure by the sentence's mean), with the query "
                 "token where it is largest, the key it is about, and the head's weights "
                 "over a window of tokens (percent, row by row).", null="none"),
        TableDoc("syntactic_table1", "Best head per relation and direction against the "
                 "best fixed-offset baseline (Clark et al.'s Table 1 format)."),
        TableDoc("syntactic_best", "Best head per relation and direction, with its margin.",
                 null="accuracy"),
        TableDoc("syntactic_heldout", "Best head per relation chosen on held-out sentences "
                 "(--select-on, or a seeded half) and its accuracy on the others."),
        TableDoc("syntactic_accuracy", "Accuracy of every head for every relation and "
                 "direction.", null="accuracy"),
        TableDoc("syntactic_baselines", "Best fixed-offset baseline per relation."),
        TableDoc("positional_heads", "Each head's most frequent offset of maximum attention.",
                 null="share"),
        TableDoc("positional_offsets", "Share of tokens whose maximum-attention token is at "
                 "each offset.", pivot=("target", "share"), null="share"),
        TableDoc("rare_words", "Share of words attending most to the sentence's rarest word, "
                 "against chance (under the model's mask).", null="share_rarest"),
        TableDoc("head_behaviour", "Share of attention that is vertical (to one key for all "
                 "queries), diagonal (to a fixed offset) or broad, per head, with intervals."),
        TableDoc("head_behaviour_classes", "Each head's behaviour shares side by side and its "
                 "dominant class."),
        TableDoc("head_distances", "Mean Jensen-Shannon divergence between every pair of heads' "
                 "attention (nats)."),
        TableDoc("head_embedding", "2-D MDS embedding of the heads by those distances, with "
                 "their roles."),
    ),
    figures=(
        FigureDoc("head_roles_map", "Tested head roles: P±k positional at offset k, Sn "
                  "syntactic for n relations, R rare-word; Ind, Dup, Prev, Snk, Ret the "
                  "induction, duplicate-token, previous-token, sink and retrieval heads."),
        FigureDoc("head_roles_map_uncorrected", "The same map by the uncorrected point rules."),
        FigureDoc("head_behaviour", "Vertical, diagonal and broad attention per head."),
        FigureDoc("head_embedding", "Heads placed by how alike their attention is (MDS)."),
        FigureDoc("head_distances", "Jensen-Shannon divergence between every pair of heads."),
        FigureDoc("positional_share", "Share of tokens at each head's best offset."),
        FigureDoc("rare_word_share", "Share of words attending most to the rarest word."),
        FigureDoc("syntactic_dep_to_head", "Accuracy per relation, dependent -> head."),
        FigureDoc("syntactic_head_to_dep", "Accuracy per relation, head -> dependent."),
    ),
    card=(
        CardItem("head_roles", "Roles", kind="row",
                 columns=("roles", "evidence", "best_offset", "offset_share", "best_relation",
                          "relation_accuracy", "relation_baseline", "share_rarest")),
        CardItem("head_examples", "Examples", kind="examples"),
        CardItem("role_evidence", "Evidence", kind="rows",
                 columns=("role", "detail", "value", "compared_to", "ci_low", "ci_high",
                          "q_value")),
        CardItem("head_stats", "Attention statistics", kind="measures"),
        CardItem("positional_offsets", "Offset of the maximum-attention token", kind="curve",
                 x="target"),
        CardItem("syntactic_accuracy", "Best relations (above their positional baseline)",
                 kind="top", sort="accuracy",
                 columns=("relation", "direction", "accuracy", "baseline", "examples"),
                 where=MAIN_DIRECTION_ROWS, above=("accuracy", "baseline")),
    ),
)

STAT_FIGURES = {
    "confidence": "Confidence: mean max attention weight",
    "entropy": "Mean attention entropy (nats)",
    "distance": "Mean attention distance (tokens)",
    "to_cls": "Mean attention to [CLS]",
    "to_sep": "Mean attention to [SEP]",
    "to_punct": "Mean attention to punctuation (tokens)",
    "to_self": "Mean attention to the token itself",
    "to_prev": "Mean attention to the previous token (rows with a real previous token)",
    "to_next": "Mean attention to the next token (rows with a real next token)",
    "sink": "Mean attention to the first token (sink)",
}
SYNTACTIC_TABLES = ("syntactic_best", "syntactic_accuracy", "syntactic_baselines",
                    "syntactic_heldout")


def _interval(low: float, high: float) -> str:
    return "" if pd.isna(low) else f"[{low:.3f}, {high:.3f}]"


def table_one(best: pd.DataFrame, heldout: pd.DataFrame | None = None) -> pd.DataFrame:
    """Clark et al.'s Table 1: best head per relation and direction vs the offset baseline,
    with its interval, the tested role, and the head selected on held-out sentences."""
    rows = best[best["direction"].isin(MAIN_DIRECTIONS)].copy()
    table = pd.DataFrame({
        "relation": rows["relation"], "direction": rows["direction"],
        "examples": rows["examples"],
        "best head": "L" + rows["layer"].astype(str) + "H" + rows["head"].astype(str),
        "accuracy": rows["accuracy"].map(lambda a: f"{a:.3f}"),
        "95% CI": [_interval(lo, hi) for lo, hi in zip(rows["ci_low"], rows["ci_high"],
                                                       strict=True)],
        "baseline (offset)": [f"{b:.3f} ({o:+d})" for b, o in zip(
            rows["baseline"], rows["baseline_offset"], strict=True)],
        "syntactic": rows["syntactic"],
    })
    if heldout is not None and not heldout.empty:
        keyed = heldout.set_index(["relation", "direction"])
        held = [keyed.loc[(r, d)] if (r, d) in keyed.index else None
                for r, d in zip(rows["relation"], rows["direction"], strict=True)]
        table["held-out head"] = [
            "" if h is None or h["layer"] < 0 else f"L{h['layer']}H{h['head']}" for h in held]
        table["held-out accuracy"] = [
            "" if h is None or pd.isna(h["heldout_accuracy"]) else f"{h['heldout_accuracy']:.3f}"
            for h in held]
        table["held-out 95% CI"] = [
            "" if h is None else _interval(h["ci_low"], h["ci_high"]) for h in held]
    return table.reset_index(drop=True)


def _sinks(analyzers: list) -> SinkScores | None:
    return next((a for a in analyzers if isinstance(a, SinkScores)), None)


class HeadRolesSection(Section):
    name = "heads"
    title = "Head roles: positional, syntactic and rare-word heads"
    doc = HEADS
    null_control = True

    def __init__(
        self,
        positional_threshold: float = 0.9,
        min_examples: int = DEFAULT_MIN_EXAMPLES,
        margin: float = 0.10,
        rare_threshold: float = 0.5,
        rarity: WordRarity | None = None,
        base_relations: bool = False,
        inference: Inference | None = None,
        rare_self: str = "include",
        select_on: Corpus | Sequence[Batch] | None = None,
        select_on_name: str = "",
        select_fraction: float = 0.5,
        # JS between every pair of heads: `heads` turns it on (None: on, leaving out inputs
        # above the whole-matrix limit; True: such inputs are refused)
        clusters: bool | None = False,
        corpus_name: str = "",
        lm=None,  # the LmHeadsSection whose roles and sink rows join these tables
        examples: bool = True,  # head_examples: the sentences behind every head
    ) -> None:
        self.positional_threshold, self.min_examples, self.margin = (
            positional_threshold, min_examples, margin)
        self.rare_threshold, self.rarity, self.base_relations = (
            rare_threshold, rarity, base_relations)
        self.inference = inference or Inference()
        self.rare_self = rare_self
        self.select_on, self.select_on_name = select_on, select_on_name
        self.select_fraction, self.clusters = select_fraction, clusters
        self.corpus_name = corpus_name
        self.lm = lm
        self.examples = examples

    def _syntactic(self, model: HookedTransformer, words=None) -> SyntacticHeads:
        return SyntacticHeads.for_model(model, min_examples=self.min_examples, margin=self.margin,
                                        base_relations=self.base_relations,
                                        inference=self.inference, words=words)

    def analyzers(self, model: HookedTransformer, tokenizer) -> list:
        if hasattr(self.select_on, "batches"):  # a corpus: batched with the model's tokenizer
            self.select_on = list(self.select_on.batches(tokenizer))
        words = WordAttentionContext()  # word-level attention computed once per layer
        inference = self.inference
        self.tokenizer = tokenizer  # decodes the examples' tokens
        found = [
            HeadStats.for_model(model, tokenizer),
            *([HeadExamples.for_model(model, tokenizer)] if self.examples else []),
            PositionalHeads.for_model(model, threshold=self.positional_threshold,
                                      inference=inference, min_tokens=self.min_examples),
            self._syntactic(model, words),
            RareWordHeads.for_model(model, rarity=self.rarity, threshold=self.rare_threshold,
                                    rare_self=self.rare_self, inference=inference, words=words,
                                    min_words=self.min_examples),
            HeadBehaviour.for_model(model, inference=inference),
        ]
        if self.clusters is not False:
            found.append(HeadClustering.for_model(model, inference=inference,
                                                  skips_long_inputs=self.clusters is None))
        if self.lm is not None:  # the sink rows of a model the measure does not run on
            found.append(SinkScores.for_model(model, inference))  # (a report's null model)
        return found

    def _held_out(self, model: HookedTransformer, syntactic: SyntacticHeads) -> pd.DataFrame:
        if self.select_on is None:
            return held_out_selection(syntactic, fraction=self.select_fraction)
        from attnlens.stream.runner import run_analyzers

        (chooser,) = run_analyzers(model, self.select_on, [self._syntactic(model)],
                                   show_progress=False)
        return held_out_selection(syntactic, chooser, selected_on=self.select_on_name,
                                  evaluated_on=self.corpus_name or "the analysed corpus")

    def _analyzer_tables(self, model: HookedTransformer, analyzers: list
                         ) -> dict[str, pd.DataFrame]:
        """The analyzers' own tables, heads by their original numbers: without the syntactic
        tables when the corpus has no trees, without ``rare_words`` when it has no words."""
        def one(kind):
            return next((a for a in analyzers if isinstance(a, kind)), None)

        stats, positional, syntactic = one(HeadStats), one(PositionalHeads), one(SyntacticHeads)
        rare, behaviour, clusters = one(RareWordHeads), one(HeadBehaviour), one(HeadClustering)
        self._clustering_note = clusters.skipped_note() if clusters is not None else ""
        tables = {"head_stats": head_stats_table(stats, self.inference)}
        examples = one(HeadExamples)
        if examples is not None:
            tables["head_examples"] = self._examples(examples)
        for analyzer in (positional, syntactic, rare, behaviour, clusters):
            if analyzer is not None:
                tables.update(analyzer.result())
        tables = renumber_tables(tables, model)  # heads by their original numbers from here
        if tables["syntactic_best"].empty:
            for name in SYNTACTIC_TABLES:
                tables.pop(name, None)
        if rare.used_sentences <= 0:
            tables.pop("rare_words")
        return tables

    def tables(self, model: HookedTransformer, analyzers: list) -> dict[str, pd.DataFrame]:
        """Every table of the section, by name (computed from the analyzers' states)."""
        tables = self._analyzer_tables(model, analyzers)
        syn_acc, rare_table = tables.get("syntactic_accuracy"), tables.get("rare_words")
        if syn_acc is not None:
            syntactic = next(a for a in analyzers if isinstance(a, SyntacticHeads))
            tables["syntactic_heldout"] = renumber_heads(self._held_out(model, syntactic),
                                                         head_ids_of(model))
            tables["syntactic_table1"] = table_one(tables["syntactic_best"],
                                                   tables["syntactic_heldout"])
        positional_heads = tables["positional_heads"]
        extra = self._lm_tables(model, tables, _sinks(analyzers))
        tests = role_tests(positional_heads, syn_acc, rare_table, extra)
        tables["role_tests"] = tests
        for view, suffix in (("tested", ""), ("uncorrected", "_uncorrected")):  # tests once
            evidence = role_evidence(positional_heads, syn_acc, rare_table, view, extra, tests)
            tables[f"head_roles{suffix}"] = classify_heads(positional_heads, syn_acc,
                                                           rare_table, view, extra, evidence)
            tables[f"role_evidence{suffix}"] = evidence
        if "head_embedding" in tables:
            tables["head_embedding"] = tables["head_embedding"].merge(
                tables["head_roles"][["layer", "head", "roles"]], on=["layer", "head"],
                how="left")
        return tables

    def null_twin(self) -> HeadRolesSection:
        """Without head clustering (`attnlens heads`): its JS distances between every pair
        of heads and their embedding give no null column (no value column)."""
        twin = copy.copy(self)
        twin.clusters = False
        return twin

    def null_tables(self, model: HookedTransformer, analyzers: list,
                    out_dir: Path) -> dict[str, pd.DataFrame]:
        """The null pass's tables: the analyzers' own (``head_stats`` with the sink rows), of
        which the null columns come; not the role tests, the held-out selection (with
        ``--select-on``, a pass of its own), Table 1 or the figures, which no null column
        reads."""
        tables = self._analyzer_tables(model, analyzers)
        self._lm_tables(model, tables, _sinks(analyzers))
        return tables

    def _lm_tables(self, model: HookedTransformer, tables: dict[str, pd.DataFrame],
                   sinks: SinkScores | None) -> pd.DataFrame | None:
        """With the language-model measure linked: its ``sink`` rows (Gu et al.'s, pooled per
        sentence, every model) replace HeadStats' (causal models, ``--pooling``) in
        ``head_stats``; returns its roles' tests when it ran on this model, else None (a
        report's null pass: the sink rows come from this section's own ``SinkScores``)."""
        if self.lm is None:
            return None
        tests, rows = None, None
        if self.lm.lm.made_for(model):
            result = self.lm.lm.compute(model)
            self.lm.roles_elsewhere = True  # its roles are listed here
            tests, rows = result.role_tests, result.sink_rows
        elif sinks is not None:
            sizes = [b.attn.n_heads // b.attn.n_kv_heads for b in model.blocks]
            rows = original_numbers(sink_rows(sinks), head_ids_of(model), sizes)
        if rows is not None:
            stats = tables["head_stats"]
            tables["head_stats"] = pd.concat([stats[stats["measure"] != "sink"], rows],
                                             ignore_index=True)
        return tests

    def _examples(self, examples: HeadExamples) -> pd.DataFrame:
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            return examples.result()["head_examples"]

        def text_of(ids: list[int]) -> str:
            return tokenizer.hf.decode(ids, skip_special_tokens=True)

        return examples.examples(tokenizer.decode_tokens, text_of)

    def figures(self, tables: dict[str, pd.DataFrame]) -> list:
        """(name, recipe) pairs drawn from the tables only: each recipe (a ``partial``) builds
        its Figure when called, in a figure_pool worker process when one is active."""
        untested = [role for role, _ in self._too_little_evidence(tables)]
        title = "Head roles after correction (q < alpha)" + (
            f"; not tested (too little data): {', '.join(untested)}" if untested else "")
        figures = [
            ("head_roles_map", partial(role_map_figure, tables["head_roles"], title)),
            ("head_roles_map_uncorrected", partial(role_map_figure,
                                                   tables["head_roles_uncorrected"],
                                                   "Head roles, uncorrected point rules")),
        ]
        head_stats = tables["head_stats"]
        for measure, title in STAT_FIGURES.items():
            rows = head_stats[head_stats["measure"] == measure]
            if rows.empty:  # not computed for this model (0 by construction)
                continue
            figures.append((f"heads_{measure}", partial(layer_head_heatmap, rows, title)))
        figures.append(("positional_share", partial(
            layer_head_heatmap, tables["positional_heads"],
            "Share of tokens at the best offset (-3..+3)", value="share", vmin=0, vmax=1)))
        if "rare_words" in tables:
            figures.append(("rare_word_share", partial(
                layer_head_heatmap, tables["rare_words"],
                "Share of words attending most to the rarest word",
                value="share_rarest", vmin=0, vmax=1)))
        if "syntactic_accuracy" in tables:
            for direction in MAIN_DIRECTIONS:
                slug = direction.replace("->", "_to_")
                figures.append((f"syntactic_{slug}", partial(
                    relation_heatmaps, tables["syntactic_accuracy"], direction)))
        if "head_behaviour" in tables:
            figures.append(("head_behaviour", partial(
                behaviour_figure, tables["head_behaviour_classes"],
                "Vertical, diagonal and broad attention (share, %)")))
        if "head_embedding" in tables:
            figures.append(("head_embedding",
                            partial(head_embedding_figure, tables["head_embedding"])))
            figures.append(("head_distances", partial(
                head_distance_figure, tables["head_distances"],
                "Mean JS divergence between heads (nats)")))
        return figures

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        tables = self.tables(model, analyzers)
        for name, table in tables.items():
            write_table(table, out_dir, name)
        output = SectionOutput(self.title, tables=tables)
        for name, fig in self.figures(tables):
            output.figures += save_figure(fig, out_dir, name, formats)
        output.notes = self._notes(tables)
        output.summary = "\n".join(output.notes)
        if "syntactic_table1" in tables:  # the console gets Table 1; the page shows a table
            output.summary += ("\n\nBest head per relation (Clark et al. Table 1 format; "
                               "held-out: chosen on other sentences, reported here):\n\n"
                               + markdown_table(tables["syntactic_table1"], markup=False))
        return output

    def _notes(self, tables: dict[str, pd.DataFrame]) -> list[str]:
        inference = self.inference
        roles = tables["head_roles"]
        counts = role_counts(roles)
        plain = role_counts(tables["head_roles_uncorrected"])
        if inference.bootstrap:
            how = (f"tested: q < {inference.alpha} after {inference.correction.upper()} "
                   f"correction, {inference.bootstrap} bootstrap replicates over sentences")
        else:
            how = "untested point rules (--bootstrap 0)"
        tested = tables.get("role_tests")  # absent when only the encoder roles ran
        tested_roles = set() if tested is None else set(tested["role"])
        lm_counts = ", ".join(f"{role.replace('_', '-')} {counts[role]}"
                              for role in ROLES[3:] if role in tested_roles)
        lines = [
            f"Heads with a role (layers and heads from 0; {how}): positional "
            f"{counts['positional']}, syntactic {counts['syntactic']}, rare-word "
            f"{counts['rare-word']}{', ' + lm_counts if lm_counts else ''} of {len(roles)} "
            f"heads. Uncorrected point rules: positional {plain['positional']}, syntactic "
            f"{plain['syntactic']}, rare-word {plain['rare-word']}."
        ]
        if "syntactic_table1" not in tables:
            lines.append("No dependency trees in the corpus: syntactic heads not measured.")
        if "rare_words" not in tables:
            lines.append("No word-split corpus: rare-word heads not measured.")
        lines += [line for _, line in self._too_little_evidence(tables)]
        if getattr(self, "_clustering_note", ""):
            lines.append(self._clustering_note)
        return lines

    def _too_little_evidence(self, tables: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
        """(role, summary line) for each role whose heads were not tested for lack of data
        (docs/heads.md: the minimum-evidence rules)."""
        found = []
        positional = tables["positional_heads"]
        if len(positional) and not positional["tested"].any():
            tokens, sentences = (int(positional[c].iloc[0]) for c in ("tokens", "n_sentences"))
            short = []
            if sentences < MIN_SENTENCES:
                short.append(f"{sentences} sentence{'' if sentences == 1 else 's'}, fewer "
                             f"than the {MIN_SENTENCES} a bootstrap over sentences needs")
            if tokens < self.min_examples:
                short.append(f"{tokens} query tokens, fewer than --min-examples "
                             f"({self.min_examples})")
            if short:
                found.append(("positional", f"Positional heads not tested: {'; '.join(short)}; "
                              "shares are illustrations, not evidence."))
        rare = tables.get("rare_words")
        if rare is not None and len(rare) and not rare["tested"].any():
            words = int(rare["words"].iloc[0])
            if words < self.min_examples:
                found.append(("rare-word", f"Rare-word heads not tested: {words} attending "
                              f"words, fewer than --min-examples ({self.min_examples}); shares "
                              "are illustrations, not evidence."))
        return found
