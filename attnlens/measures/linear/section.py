"""Report section: the fast-weight / linear-attention view of each head."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.linear.linear_attention import LinearAttentionView
from attnlens.model.head_ids import HeadIds, head_ids_of, renumber_heads
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import keys_by_length, layer_head_heatmap
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import KATHAROPOULOS, SCHLAG
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

LINEAR = SectionDoc(
    about=(
        "A head without its softmax is a fast-weight memory storing v_j k_j^T, read exactly "
        "only when keys are orthogonal. interference = mean |cos| between distinct keys; "
        "effective_keys = participation ratio of the keys' Gram eigenvalues (at most "
        "min(n, d_head)); linear_error = relative output error of elu(x)+1 linear attention, "
        "raw_error of the unnormalised (Q K^T) V."
    ),
    papers=(SCHLAG, KATHAROPOULOS),
    command="attnlens linear",
    tables=(
        TableDoc("linear_attention", "Per head, means over sentences.",
                 pivot=("measure", "value")),
        TableDoc("linear_keys_by_length", "Effective orthogonal keys by sentence length."),
    ),
    figures=(
        FigureDoc("linear_error", "Relative output error of elu+1 linear attention."),
        FigureDoc("linear_interference", "Key interference (mean |cos| of distinct keys)."),
        FigureDoc("linear_keys_by_length", "Effective orthogonal keys against length."),
    ),
    card=(CardItem("linear_attention", "Linear attention", kind="measures"),),
)

EXPLANATION = (
    "A head without its softmax is a fast-weight memory (Schlag et al. 2021): it stores "
    "v_j k_j^T and reads with q_i, exactly only when the keys are orthogonal. interference = "
    "mean |cos| between distinct keys of a sentence; effective_keys = participation ratio of "
    "the eigenvalues of the keys' cosine Gram matrix (at most min(n, d_head)). linear_error = "
    "||O_lin - O|| / ||O|| for the normalised linear attention with φ(x) = elu(x) + 1 "
    "(Katharopoulos et al. 2020); raw_error for the unnormalised (Q K^T) V, "
    "raw_error_rescaled after its best single gain."
)
RANKED = 5
# `attnlens analyze` bounds this section's cost: 512 sentences evenly spaced by corpus index
# (the same for any batching: no per-batch bound). `attnlens linear` reads every one.
REPORT_PER_BATCH = None
REPORT_MAX_SENTENCES = 512


def _ranked(table: pd.DataFrame, measure: str, best: bool) -> str:
    rows = table[table["measure"] == measure].sort_values("value", ascending=best).head(RANKED)
    return ", ".join(f"L{int(r.layer)}H{int(r.head)} {r.value:.3f}" for r in rows.itertuples())


def linear_summary(tables: dict[str, pd.DataFrame], analyzer: LinearAttentionView) -> str:
    table = tables["linear_attention"]
    means = table.groupby("measure")["value"].mean()
    return "\n".join([
        f"{analyzer.sentences} sentences, mean length {means['length']:.1f} tokens, "
        f"d_head {analyzer.d_head}.",
        f"Key interference (mean |cos|): mean {means['interference']:.3f} over heads; "
        f"effective orthogonal keys: mean {means['effective_keys']:.2f} "
        f"({means['effective_keys_frac']:.1%} of min(n, d_head)).",
        f"Most linearisable heads (smallest elu+1 linear-attention error): "
        f"{_ranked(table, 'linear_error', True)}",
        f"Least linearisable: {_ranked(table, 'linear_error', False)}",
        f"Mean errors over heads: elu+1 {means['linear_error']:.3f}, unnormalised QK^T V "
        f"{means['raw_error']:.3g}, rescaled {means['raw_error_rescaled']:.3f}.",
    ])


def write_linear(
    analyzer: LinearAttentionView, out_dir: Path, formats: tuple[str, ...],
    title: str = "Fast weights and linear attention", head_ids: HeadIds | None = None,
) -> SectionOutput:
    """Tables, figures and summary; heads by their original numbers (``head_ids``)."""
    tables = {name: renumber_heads(t, head_ids) for name, t in analyzer.result().items()}
    output = SectionOutput(title, tables=dict(tables))
    for name, table in tables.items():
        write_table(table, out_dir, name)
    table = tables["linear_attention"]
    fig = partial(  # a recipe: built and drawn in a figure worker
        layer_head_heatmap, table[table["measure"] == "linear_error"],
        "Relative output error of elu+1 linear attention (lower: more linearisable)", vmin=0,
    )
    output.figures += save_figure(fig, out_dir, "linear_error", formats)
    fig = partial(layer_head_heatmap, table[table["measure"] == "interference"],
                  "Key interference: mean |cos| between distinct keys", vmin=0)
    output.figures += save_figure(fig, out_dir, "linear_interference", formats)
    if not tables["linear_keys_by_length"].empty:
        fig = partial(keys_by_length, tables["linear_keys_by_length"], analyzer.d_head,
                      "Effective orthogonal keys against sentence length")
        output.figures += save_figure(fig, out_dir, "linear_keys_by_length", formats)
    output.summary = EXPLANATION + "\n\n" + linear_summary(tables, analyzer)
    return output


class LinearSection(Section):
    """Key interference, effective keys and linear-attention errors of every head."""

    name = "linear"
    doc = LINEAR
    null_control = True
    title = "Fast weights and linear attention: how linearisable is each head?"

    def __init__(self, per_batch: int | None = REPORT_PER_BATCH,
                 max_sentences: int | None = REPORT_MAX_SENTENCES) -> None:
        self.per_batch, self.max_sentences = per_batch, max_sentences

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[LinearAttentionView]:
        return [LinearAttentionView.for_model(model, per_batch=self.per_batch,
                                              max_sentences=self.max_sentences)]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (analyzer,) = [a for a in analyzers if isinstance(a, LinearAttentionView)]
        return write_linear(analyzer, out_dir, formats, self.title, head_ids_of(model))
