"""Report section: how much attention local windows, global tokens and BigBird would keep."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.sparse.sparse import BIGBIRD, SparseCoverage
from attnlens.model.head_ids import HeadIds, head_ids_of, renumber_heads
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_head_heatmap, window_coverage_curves
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import BIGBIRD_PAPER, LONGFORMER
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

SPARSE = SectionDoc(
    about=(
        "How much of each head's attention a sparse pattern would keep: a local window "
        "|i - j| <= w, global tokens (special tokens plus the first g positions), both, and "
        "BigBird (window, global and seeded random keys) against as many random keys. "
        "output_error = ||(P - P_S) V|| / ||P V|| for the pattern restricted to the set and "
        "renormalised."
    ),
    papers=(LONGFORMER, BIGBIRD_PAPER),
    command="attnlens sparse",
    tables=(
        TableDoc("sparse_heads", "Per head: smallest window keeping the coverage level (on the "
                 "window grid, exact, with global tokens), mass and error at that window.",
                 pivot=("measure", "value")),
        TableDoc("sparse_coverage", "Mass and output error per head, pattern and window.",
                 keys=("window",)),
        TableDoc("sparse_window_curve", "Mass inside ±w for every w, per head.",
                 keys=("window",)),
    ),
    figures=(
        FigureDoc("sparse_window90", "Smallest window ±w keeping 90 % of each head's mass."),
        FigureDoc("sparse_window90_global", "The same with the global tokens added."),
        FigureDoc("sparse_window_curves", "Mass inside ±w against w, one line per head."),
    ),
    card=(CardItem("sparse_heads", "Sparse coverage", kind="measures"),),
)

# `attnlens analyze` bounds this section's cost: 512 sentences evenly spaced by corpus index
# (the same for any batching: no per-batch bound). `attnlens sparse` reads every one.
REPORT_PER_BATCH = None
REPORT_MAX_SENTENCES = 512

EXPLANATION = (
    "Sparse attention keeps a fixed subset of keys per query: a local window |i - j| <= w "
    "(Longformer, Beltagy et al. 2020), global tokens (special tokens plus the first g "
    "positions) and, in BigBird (Zaheer et al. 2020), a few random keys. mass = mean share "
    "of a row's attention inside the set; output_error = ||(P - P_S) V|| / ||P V|| with P_S "
    "the pattern restricted to the set and renormalised. 'random' = the expected mass of as "
    "many uniformly random keys as BigBird's set has."
)


def _count_heads(coverage: pd.DataFrame, pattern: str, window: int, level: float) -> str:
    rows = coverage[(coverage["pattern"] == pattern) & (coverage["window"] == window)
                    & (coverage["measure"] == "mass")]
    if rows.empty:
        return "n/a"
    return f"{int((rows['value'] >= level).sum())} of {len(rows)}"


def sparse_summary(tables: dict[str, pd.DataFrame], analyzer: SparseCoverage) -> str:
    """Quotable lines: heads served by small windows, BigBird against random keys."""
    coverage, heads = tables["sparse_coverage"], tables["sparse_heads"]
    level = analyzer.coverage
    lines = [
        f"{analyzer.sentences} sentences; {level:.0%} of the mass; "
        f"global tokens = special tokens + first {analyzer.n_global} positions."
    ]
    for w in analyzer.windows:
        lines.append(
            f"window ±{w}: serves {_count_heads(coverage, 'window', w, level)} heads alone, "
            f"{_count_heads(coverage, 'window+global', w, level)} with the global tokens"
        )
    exact = heads[heads["measure"] == "window90_exact"]["value"]
    plus = heads[heads["measure"] == "window90_global"]["value"]
    lines.append(
        f"smallest window for {level:.0%} (integer): median {exact.median():.0f}, "
        f"max {exact.max():.0f}; with global tokens median {plus.median():.0f}, "
        f"max {plus.max():.0f} (NaN: beyond ±{analyzer.max_distance})"
    )
    mass = coverage[coverage["measure"] == "mass"]
    by_pattern = mass.groupby("pattern")["value"].mean()
    error = coverage[(coverage["measure"] == "output_error") & (coverage["pattern"] == "bigbird")]
    lines.append(
        f"BigBird (window ±{BIGBIRD['window']}, {BIGBIRD['n_global']} global, "
        f"{BIGBIRD['n_random']} random; seed {analyzer.seed}) keeps {by_pattern['bigbird']:.3f} "
        f"of the mass on average vs {by_pattern['random']:.3f} for as many random keys; "
        f"output error {error['value'].mean():.3f} (mean over heads)"
    )
    return "\n".join(lines)


def write_sparse(
    analyzer: SparseCoverage, out_dir: Path, formats: tuple[str, ...],
    title: str = "Sparse-pattern coverage", head_ids: HeadIds | None = None,
) -> SectionOutput:
    """Tables, figures and summary; heads by their original numbers (``head_ids``)."""
    tables = {name: renumber_heads(t, head_ids) for name, t in analyzer.result().items()}
    output = SectionOutput(title, tables=dict(tables))
    for name, table in tables.items():
        write_table(table, out_dir, name)
    heads = tables["sparse_heads"]
    level = f"{analyzer.coverage:.0%}"
    fig = partial(  # a recipe: built and drawn in a figure worker
        layer_head_heatmap, heads[heads["measure"] == "window90_exact"],
        f"Smallest window ±w keeping {level} of the attention (blank: > {analyzer.max_distance})",
        cmap="viridis_r", fmt="{:.0f}",
    )
    output.figures += save_figure(fig, out_dir, "sparse_window90", formats)
    fig = partial(  # a recipe: built and drawn in a figure worker
        layer_head_heatmap, heads[heads["measure"] == "window90_global"],
        f"Smallest window ±w keeping {level} with the global tokens",
        cmap="viridis_r", fmt="{:.0f}",
    )
    output.figures += save_figure(fig, out_dir, "sparse_window90_global", formats)
    fig = partial(window_coverage_curves, tables["sparse_window_curve"], analyzer.coverage,
                  "Attention mass inside ±w, one line per head")
    output.figures += save_figure(fig, out_dir, "sparse_window_curves", formats)
    output.summary = EXPLANATION + "\n\n" + sparse_summary(tables, analyzer)
    return output


class SparseSection(Section):
    """Sparse-pattern coverage of every head over the corpus."""

    name = "sparse"
    doc = SPARSE
    null_control = True
    title = "Sparse-pattern coverage: windows, global tokens, BigBird"

    def __init__(self, per_batch: int | None = REPORT_PER_BATCH,
                 max_sentences: int | None = REPORT_MAX_SENTENCES, **options) -> None:
        self.options = {"per_batch": per_batch, "max_sentences": max_sentences, **options}

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[SparseCoverage]:
        return [SparseCoverage.for_model(model, **self.options)]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (analyzer,) = [a for a in analyzers if isinstance(a, SparseCoverage)]
        return write_sparse(analyzer, out_dir, formats, self.title, head_ids_of(model))
