"""Report section: query/key asymmetry of the weights and of the attention patterns."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry
from attnlens.measures.asymmetry.weight_asymmetry import weight_asymmetry_table
from attnlens.model.head_ids import head_ids_of, renumber_heads, renumber_tables
from attnlens.model.protocol import left_out_note, missing_parts
from attnlens.model.query_blocks import whole_matrix_note
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_head_heatmap
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import VASWANI
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

# What the two halves read from the model (attnlens.model.protocol.PARTS).
WEIGHT_PARTS = ("QK", "norm", "rotary")
PATTERN_PARTS = ("norm",)

ASYMMETRY = SectionDoc(
    about=(
        "Whether attention is one-way. A head scores the pair (i, j) with x_i W_Q W_K^T x_j; "
        "the antisymmetric part of W_Q W_K^T is what makes i's interest in j differ from j's "
        "in i (antisym_share: its share of the squared Frobenius norm). On the corpus, "
        "asym_ratio = ||P - P^T||_F / ||P||_F and directed_share (pairs whose stronger "
        "direction carries twice the weaker) are compared with unweighted, symmetric-logit "
        "self-attention softmax(X X^T / sqrt(C)) on the same layer inputs."
    ),
    papers=(VASWANI,),
    command="attnlens asymmetry",
    tables=(
        TableDoc("weight_asymmetry", "Symmetric and antisymmetric shares of each head's "
                 "W_Q W_K^T (with and without biases).", pivot=("measure", "value")),
        TableDoc("pattern_asymmetry", "Asymmetry of the attention patterns on the corpus.",
                 pivot=("measure", "value")),
        TableDoc("asymmetry_baseline", "The same measures for the symmetric-logit baseline.",
                 pivot=("measure", "value")),
    ),
    figures=(
        FigureDoc("asymmetry_weights", "Antisymmetric share of ||W_Q W_K^T||²."),
        FigureDoc("asymmetry_patterns", "Pattern asymmetry ||P - P^T|| / ||P||."),
        FigureDoc("asymmetry_directed", "Share of attended pairs that are one-way."),
    ),
    card=(
        CardItem("weight_asymmetry", "Weight asymmetry", kind="measures"),
        CardItem("pattern_asymmetry", "Pattern asymmetry", kind="measures"),
    ),
)

def asymmetry_summary_text(
    weights: pd.DataFrame, patterns: pd.DataFrame | None, baseline: pd.DataFrame | None
) -> str:
    def stat(table: pd.DataFrame, measure: str) -> str:
        v = table[table["measure"] == measure]["value"]
        return f"mean {v.mean():.3f} (range {v.min():.3f} .. {v.max():.3f})"

    lines = [
        f"weights: antisymmetric share of ||W_Q W_K^T||^2 {stat(weights, 'antisym_share')}",
    ]
    if patterns is not None:
        lines.append("patterns (heads | unweighted softmax(X X^T / sqrt(C)) baseline, per layer):")
        for measure in ("asym_ratio", "directed_share", "reciprocity"):
            base = stat(baseline, measure) if baseline is not None else "-"
            lines.append(f"  {measure}: heads {stat(patterns, measure)} | baseline {base}")
        if baseline is not None:
            for measure in ("product_violations", "dominance_violations"):
                worst = baseline[baseline["measure"] == measure]["value"].max()
                lines.append(f"  baseline {measure}: at most {worst:.3g} of pairs in a layer")
    return "\n".join(lines)


class AsymmetrySection(Section):
    """Weight asymmetry of every head; with a corpus, pattern asymmetry and the baseline."""

    name = "asymmetry"
    title = "Query/key asymmetry"
    doc = ASYMMETRY
    null_control = True

    def __init__(self, weights_only: bool = False, factor: float = 2.0) -> None:
        self.weights_only = weights_only
        self.factor = factor
        self.needs_corpus = not weights_only

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[PatternAsymmetry]:
        if self.weights_only or model.cfg.causal or missing_parts(model, PATTERN_PARTS):
            return []
        return [PatternAsymmetry.for_model(model, factor=self.factor)]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        output = SectionOutput(self.title)
        notes = []
        weights = None
        missing = missing_parts(model, WEIGHT_PARTS)
        if missing:
            notes.append(left_out_note("the weight asymmetry of W_Q W_K^T", missing))
        else:
            weights = renumber_heads(weight_asymmetry_table(model), head_ids_of(model))
            write_table(weights, out_dir, "weight_asymmetry")
            output.tables["weight_asymmetry"] = weights
            fig = partial(  # a recipe: built and drawn in a figure worker
                layer_head_heatmap,
                weights[weights["measure"] == "antisym_share"],
                "Antisymmetric share of ||W_Q W_K^T||_F^2",
                vmin=0,
                vmax=1,
            )
            output.figures += save_figure(fig, out_dir, "asymmetry_weights", formats)
        missing = missing_parts(model, PATTERN_PARTS)
        if missing and not self.weights_only and not model.cfg.causal:
            notes.append(left_out_note("the pattern asymmetry and its baseline", missing))
        patterns = baseline = None
        found = [a for a in analyzers if isinstance(a, PatternAsymmetry)]
        if found:
            tables = renumber_tables(found[0].result(), model)  # original head numbers
            for name, table in tables.items():
                write_table(table, out_dir, name)
            output.tables.update(tables)
            patterns = tables["pattern_asymmetry"]
            baseline = tables.get("asymmetry_baseline")
            fig = partial(  # a recipe: built and drawn in a figure worker
                layer_head_heatmap,
                patterns[patterns["measure"] == "asym_ratio"],
                "Pattern asymmetry ||P - P^T||_F / ||P||_F",
                vmin=0,
            )
            output.figures += save_figure(fig, out_dir, "asymmetry_patterns", formats)
            fig = partial(  # a recipe: built and drawn in a figure worker
                layer_head_heatmap,
                patterns[patterns["measure"] == "directed_share"],
                f"Share of attended pairs that are one-way (>= {found[0].factor:g}x)",
                vmin=0,
                vmax=1,
            )
            output.figures += save_figure(fig, out_dir, "asymmetry_directed", formats)
        text = asymmetry_summary_text(weights, patterns, baseline) if weights is not None else ""
        if found:
            notes.append(whole_matrix_note("Pattern asymmetry measures", model))
        output.summary = "\n".join(filter(None, [text, *notes]))
        return output
