"""Report section and writers: attention rollout and attention flow (Abnar & Zuidema 2020)."""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.loaders.pooling import checkpoint_pooling
from attnlens.measures.rollout.flow import FlowAnalyzer
from attnlens.measures.rollout.rollout import RolloutAnalyzer
from attnlens.model.query_blocks import whole_matrix_note
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_measure_lines, token_matrix_heatmap, token_row_bars
from attnlens.report.catalog import FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import ABNAR
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

ROLLOUT = SectionDoc(
    about=(
        "Which input tokens a position draws on after several layers have mixed them. "
        "Rollout: per layer Ã_l = r·fuse_heads(A_l) + (1-r)·I with rows renormalised, "
        "R_0 = Ã_0, R_l = Ã_l R_(l-1); R_l[i, j] is the share of input token j in position i "
        "after block l (positions from 0, special tokens included). Flow replaces the product "
        "by the maximum flow through the layered graph with those capacities."
    ),
    papers=(ABNAR,),
    command="attnlens rollout",
    tables=(
        TableDoc("rollout_layers", "Per layer, means over query rows: mass on special tokens, "
                 "on the token itself, information moved by the block (total variation "
                 "between R_l and R_(l-1) rows), source distance, mixing of the block alone.",
                 pivot=("measure", "value")),
        TableDoc("rollout", "Rollout matrices of the kept sentences (one row per layer, query "
                 "and key position)."),
        TableDoc("flow", "Attention flow of the kept sentences (rows normalised; max_flow: "
                 "the raw maximum flow)."),
    ),
    figures=(FigureDoc("rollout_layers", "Rollout shares and mixing by layer."),),
)

# `attnlens analyze` keeps this section cheap: corpus shares from every sentence, whole
# matrices (table and figures) for the first two sentences of the corpus only, each at most
# REPORT_MAX_ENTRIES entries (layers x n^2: 6 layers up to 209 tokens, 24 layers up to 104),
# so the kept matrices cannot grow with depth and length.
REPORT_SENTENCES = 2
REPORT_MAX_ENTRIES = 2**18
MAX_FIGURE_SENTENCES = 20

EXPLANATION = (
    "Attention rollout (Abnar & Zuidema 2020, 'Quantifying Attention Flow in Transformers'): "
    "per layer Ã_l = r·fuse_heads(A_l) + (1-r)·I with rows renormalised, R_0 = Ã_0, "
    "R_l = Ã_l R_(l-1); R_l[i, j] is the share of input token j in position i after block l. "
    "Attention flow replaces the product by the maximum flow through the layered graph "
    "with those capacities. moved = ½ Σ_j |R_l[i, j] - R_(l-1)[i, j]|: the layers that move "
    "information most have the largest values."
)


def readout(sentence: pd.DataFrame, causal: bool,
            pooling: str | None = None) -> tuple[pd.DataFrame, str, str]:
    """The row the model's sentence vector reads, as ``key, key_token, value`` rows, with a
    title and a file-name part: the mean over every token's row for a mean-pooling model
    (sentence-transformers' ``1_Pooling``: all real tokens, special ones included; max
    pooling has no row and is read as the mean too), the last token's for a causal model
    (or ``last`` pooling), else [CLS] (position 0)."""
    pooling = pooling or ("last" if causal else "cls")
    if pooling in ("mean", "max"):
        rows = sentence.groupby(["key", "key_token"], as_index=False)["value"].mean()
        label = "the mean over every token (the model's mean pooling)"
        if pooling == "max":
            label = "the mean over every token (max pooling has no single row)"
        return rows, label, "mean"
    query = int(sentence["query"].max()) if pooling == "last" else 0
    rows = sentence[sentence["query"] == query]
    token = rows["query_token"].iloc[0]
    return rows, f"position {query} ({token})", "readout"


def sentence_figures(
    table: pd.DataFrame,
    out_dir: Path,
    formats: tuple[str, ...],
    causal: bool,
    method: str = "rollout",
    max_sentences: int = MAX_FIGURE_SENTENCES,
    pooling: str | None = None,
) -> list[Path]:
    """Per sentence: heatmap of the last layer's matrix and a bar chart of the read-out row
    (``readout``: the way the model pools)."""
    paths: list[Path] = []
    if table.empty:
        return paths
    last = table[table["layer"] == table["layer"].max()]
    for sentence in sorted(last["sentence"].unique())[:max_sentences]:
        rows = last[last["sentence"] == sentence]
        layer = int(rows["layer"].iloc[0])
        fig = partial(  # a recipe: built and drawn in a figure worker
            token_matrix_heatmap, rows,
            f"Attention {method} after layer {layer}, sentence {sentence}",
        )
        paths += save_figure(fig, out_dir, f"{method}_sentence{sentence}_heatmap", formats)
        row, label, _ = readout(rows, causal, pooling)
        fig = partial(  # a recipe: built and drawn in a figure worker
            token_row_bars, row,
            f"{method.capitalize()} of {label} after layer {layer}, sentence {sentence}",
        )
        paths += save_figure(fig, out_dir, f"{method}_sentence{sentence}_readout", formats)
    return paths


def rollout_summary(layers: pd.DataFrame) -> str:
    """Lines a reader can quote: where information moves and where the mass ends up."""
    value = layers.set_index(["measure", "layer"])["value"]
    moved = value["moved"].sort_values(ascending=False)
    last = int(layers["layer"].max())
    mixing = value["mixing"].sort_values(ascending=False)
    return "\n".join([
        "Mixing of each block alone (1 - Ã_l[i, i]), largest first: "
        + ", ".join(f"layer {int(k)} {v:.3f}" for k, v in mixing.items()),
        "Information moved per layer (mean total variation between R_l and R_(l-1) rows), "
        "largest first: " + ", ".join(f"layer {int(k)} {v:.3f}" for k, v in moved.items()),
        "Rollout mass on special tokens by layer: "
        + ", ".join(f"{v:.3f}" for v in value["special_share"].sort_index()),
        "Rollout mass on the token itself by layer: "
        + ", ".join(f"{v:.3f}" for v in value["self_share"].sort_index()),
        f"After the last layer ({last}) a position draws {value['self_share'][last]:.1%} "
        f"from itself and {value['special_share'][last]:.1%} from special tokens, from "
        f"{value['distance'][last]:.1f} tokens away on average.",
    ])


def write_rollout(
    rollout: RolloutAnalyzer,
    out_dir: Path,
    formats: tuple[str, ...],
    causal: bool,
    title: str = "Attention rollout",
    max_figures: int = MAX_FIGURE_SENTENCES,
    pooling: str | None = None,
) -> SectionOutput:
    """Write ``rollout_layers`` (and ``rollout`` when sentences were kept) with figures."""
    tables = rollout.result()
    output = SectionOutput(title, tables=dict(tables))
    for name, table in tables.items():
        write_table(table, out_dir, name, formats=("csv",) if name == "rollout" else ("csv", "md"))
    layers = tables["rollout_layers"]
    fig = partial(  # a recipe: built and drawn in a figure worker
        layer_measure_lines, layers, ["special_share", "self_share", "moved", "mixing"],
        f"Rollout by layer (r = {rollout.residual}, {rollout.fusion} over heads; "
        f"{rollout.sentences} sentences)",
    )
    output.figures += save_figure(fig, out_dir, "rollout_layers", formats)
    if "rollout" in tables:
        output.figures += sentence_figures(tables["rollout"], out_dir, formats, causal,
                                           max_sentences=max_figures, pooling=pooling)
    output.summary = EXPLANATION + "\n\n" + rollout_summary(layers)
    if rollout.skipped:
        output.summary += (
            f"\n\nNot kept whole (more than {rollout.max_entries:,} matrix entries, layers x "
            "tokens²): sentences " + ", ".join(map(str, sorted(rollout.skipped))) + "."
        )
    return output


def write_flow(
    flow: FlowAnalyzer,
    out_dir: Path,
    formats: tuple[str, ...],
    causal: bool,
    output: SectionOutput,
    max_figures: int = MAX_FIGURE_SENTENCES,
    pooling: str | None = None,
) -> SectionOutput:
    """Add ``flow.csv`` and the flow figures to ``output``."""
    table = flow.result()["flow"]
    write_table(table, out_dir, "flow", formats=("csv",))
    output.tables["flow"] = table
    output.figures += sentence_figures(table, out_dir, formats, causal, method="flow",
                                       max_sentences=max_figures, pooling=pooling)
    done = table["sentence"].nunique() if not table.empty else 0
    line = f"Attention flow: {done} sentences solved (at most {flow.max_tokens} tokens each)"
    if flow.skipped:
        line += "; skipped as too long: sentences " + ", ".join(map(str, sorted(flow.skipped)))
    output.summary += "\n" + line + "."
    return output


class RolloutSection(Section):
    """Rollout shares per layer over the corpus, the matrices of the first sentences, and
    (``method="flow"``) attention flow of those sentences."""

    name = "rollout"
    title = "Attention rollout: where information comes from"
    doc = ROLLOUT
    null_control = True

    def __init__(self, residual: float = 0.5, fusion: str = "mean",
                 sentences: int = REPORT_SENTENCES, method: str = "rollout",
                 flow_max_tokens: int = 40, max_figures: int = MAX_FIGURE_SENTENCES,
                 max_entries: int | None = REPORT_MAX_ENTRIES) -> None:
        self.residual, self.fusion, self.sentences = residual, fusion, sentences
        self.max_entries = max_entries
        self.method, self.flow_max_tokens, self.max_figures = method, flow_max_tokens, max_figures

    def analyzers(self, model: HookedTransformer, tokenizer) -> list:
        options = {"residual": self.residual, "fusion": self.fusion, "keep": self.sentences}
        analyzers = [RolloutAnalyzer.for_model(model, tokenizer, max_entries=self.max_entries,
                                               **options)]
        if self.method == "flow":
            analyzers.append(FlowAnalyzer.for_model(model, tokenizer,
                                                    max_tokens=self.flow_max_tokens, **options))
        return analyzers

    def null_twin(self) -> RolloutSection:
        """Without the sentences kept whole and without attention flow: the null columns
        come from ``rollout_layers`` only (``rollout`` and ``flow`` have no measure column)."""
        twin = copy.copy(self)
        twin.sentences, twin.method = 0, "rollout"
        return twin

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (rollout,) = [a for a in analyzers if isinstance(a, RolloutAnalyzer)]
        causal = model.cfg.causal
        pooling, source = checkpoint_pooling(model.cfg.source.get("path"), causal)
        figures = self.max_figures if self.method == "rollout" else 0
        output = write_rollout(rollout, out_dir, formats, causal, self.title, figures,
                               pooling=pooling)
        for flow in (a for a in analyzers if isinstance(a, FlowAnalyzer)):
            write_flow(flow, out_dir, formats, causal, output, max_figures=self.max_figures,
                       pooling=pooling)
        output.summary += (f"\nRead-out rows are read the way the model pools: {pooling} "
                           f"({source}).")
        output.summary += "\n\n" + whole_matrix_note("Rollout and flow", model)
        return output
