"""Report section and writers: rank collapse with depth (pretrained variants, paths, synthetic)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.collapse.paths import PathCollapse
from attnlens.measures.collapse.synthetic import machine_floor
from attnlens.measures.collapse.variant_collapse import VariantCollapse
from attnlens.model.protocol import left_out_note, missing_parts
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import collapse_curves, double_log_fit, path_collapse_curve
from attnlens.report.catalog import FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import DONG
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import save_figure, write_table

COLLAPSE = SectionDoc(
    about=(
        "Pure self-attention drives token representations towards one shared vector (rank "
        "one) doubly exponentially fast with depth; skip connections prevent it (Dong et al.). "
        "The relative residual ||X - 1 x^T|| / ||X|| is measured after each block of the "
        "model's own weights with parts removed (san: attention only; +skip, +mlp, +ln; full "
        "block), and for products of attention matrices along paths of heads."
    ),
    papers=(DONG,),
    command="attnlens collapse",
    tables=(
        TableDoc("collapse_variants", "Relative residual per block variant and depth."),
        TableDoc("collapse_fits", "Doubly exponential and exponential fits of the decay."),
        TableDoc("path_collapse", "Rank-1 residual of head-path attention products by length."),
        TableDoc("path_samples", "Every sampled path (L0H4 > L1H9: head 4 of layer 0, then "
                 "head 9 of layer 1)."),
    ),
    figures=(
        FigureDoc("collapse_variants", "Relative residual against depth per block variant."),
        FigureDoc("path_collapse", "Rank-1 residual of attention products along head paths."),
    ),
)

# `attnlens analyze` keeps this section cheap: 32 sentences for the variants and 128 for the
# head paths, evenly spaced by corpus index (the same for any batching: no per-batch bound),
# and 16 sampled paths per length.
REPORT_PER_BATCH = None
REPORT_MAX_SENTENCES = 32
REPORT_PATH_SENTENCES = 128
REPORT_PATHS = 16


def _last_depth_line(curves: pd.DataFrame, norm: str = "composite") -> str:
    rows = curves[curves["norm"] == norm]
    last = rows[rows["depth"] == rows["depth"].max()]
    parts = [f"{r.variant} {r.geo_mean:.2e}" for r in last.itertuples()]
    return f"depth {int(rows['depth'].max())}: " + ", ".join(parts)


def _floor_depths(curves: pd.DataFrame, threshold: float = 1e-13, norm: str = "composite") -> str:
    """For each variant, the first depth whose geometric-mean residual is below ``threshold``."""
    parts = []
    for variant, rows in curves[curves["norm"] == norm].groupby("variant", sort=False):
        below = rows[rows["geo_mean"] < threshold]["depth"]
        parts.append(f"{variant} {int(below.min()) if len(below) else 'never'}")
    return ", ".join(parts)


def write_pretrained_collapse(
    variants: VariantCollapse | None,
    paths: PathCollapse,
    out_dir: str | Path,
    formats: tuple[str, ...],
    title: str = "Rank collapse",
) -> SectionOutput:
    """Tables and figures of the pretrained variants (None: left out) and the head paths."""
    variant_tables = variants.result() if variants is not None else {}
    tables = {**variant_tables, **paths.result()}  # path labels: original head numbers
    output = SectionOutput(title, tables=tables)
    for name, table in tables.items():
        write_table(table, out_dir, name)
    curves = tables.get("collapse_variants", pd.DataFrame())
    fits = tables.get("collapse_fits", pd.DataFrame())
    if not curves.empty:
        fig = partial(  # a recipe: built and drawn in a figure worker
            collapse_curves,
            curves,
            f"Block variants on the model's weights ({variants.sentences} sentences; "
            "geometric mean, band q10..q90)",
            band=("q10", "q90"),
            floor=machine_floor(),
        )
        output.figures += save_figure(fig, out_dir, "collapse_variants", formats)
    if not tables["path_collapse"].empty:
        fig = partial(  # a recipe: built and drawn in a figure worker
            path_collapse_curve,
            tables["path_collapse"],
            f"Head paths: {paths.n_paths} sampled per length, {paths.sentences} sentences",
        )
        output.figures += save_figure(fig, out_dir, "path_collapse", formats)
    lines = []
    if not curves.empty:
        lines.append("Relative residual ||X - 1 mean^T|| / ||X|| (composite norm: an upper bound "
                     "of Dong et al.'s min_x ||X - 1 x^T||; geometric mean over "
                     f"{variants.sentences} sentences) at the last " + _last_depth_line(curves))
        lines.append("First depth below 1e-13: " + _floor_depths(curves))
        san = fits[(fits["variant"] == "san") & (fits["norm"] == "composite")]
        if not san.empty and san["points"].iloc[0] >= 3:
            s = san.iloc[0]
            lines.append(
                f"Pure attention: -log r grows x{s.double_base:.2f} per layer "
                f"(log(-log r) fit R² {s.double_r2:.3f}; log r fit R² {s.single_r2:.3f})"
            )
    if not tables["path_collapse"].empty:
        p = tables["path_collapse"].sort_values("path_length")
        lines.append("Rank-1 residual of head-path attention products (geometric mean over "
                     "paths), by length: "
                     + ", ".join(f"{r.path_length}: {r.geo_mean:.2e}" for r in p.itertuples()))
    if paths.skipped:
        lines.append(f"{paths.skipped} sampled sentences were too long for the head paths' "
                     f"memory bound ({paths.max_elements:,} pattern entries) and were left out "
                     "of the path products.")
    output.summary = "\n\n".join(lines)
    return output


def write_synthetic_collapse(
    tables: dict[str, pd.DataFrame], out_dir: str | Path, formats: tuple[str, ...]
) -> SectionOutput:
    """Tables and figures of ``synthetic.run_synthetic``."""
    output = SectionOutput("Rank collapse in random attention stacks", tables=dict(tables))
    for name, table in tables.items():
        write_table(table, out_dir, name)
    curves, fits = tables["synthetic_collapse"], tables["synthetic_fits"]
    spec = dict(zip(tables["synthetic_spec"]["parameter"], tables["synthetic_spec"]["value"],
                    strict=True))
    fig = partial(  # a recipe: built and drawn in a figure worker
        collapse_curves,
        curves,
        f"Random stacks: width {spec['width']}, {spec['heads']} heads, {spec['tokens']} tokens, "
        f"{spec['seeds']} seeds (geometric mean, band min..max)",
        floor=machine_floor(),
    )
    output.figures += save_figure(fig, out_dir, "synthetic_collapse", formats)
    fig = partial(
        double_log_fit, curves, fits, "Doubly exponential decay: log(-log r) against depth"
    )
    output.figures += save_figure(fig, out_dir, "synthetic_fit", formats)
    output.summary = (
        "Relative residual (mean token, composite norm: an upper bound of min_x ||X - 1 x^T||; "
        "geometric mean over seeds) at the last "
        + _last_depth_line(curves)
        + "\n\nFirst depth below 1e-13: "
        + _floor_depths(curves)
    )
    return output


class CollapseSection(Section):
    """Rank collapse of the model at hand: its block variants and its head paths.

    The defaults keep `attnlens analyze` cheap (see ``REPORT_*``); `attnlens collapse` passes
    its own bounds (None: no bound).
    """

    name = "collapse"
    title = "Rank collapse with depth"
    doc = COLLAPSE

    def __init__(
        self,
        variants: Sequence[str] | None = None,
        n_paths: int = REPORT_PATHS,
        per_batch: int | None = REPORT_PER_BATCH,
        max_sentences: int | None = REPORT_MAX_SENTENCES,
        path_sentences: int | None = REPORT_PATH_SENTENCES,
    ) -> None:
        self.variants = variants
        self.n_paths, self.per_batch = n_paths, per_batch
        self.max_sentences, self.path_sentences = max_sentences, path_sentences

    def analyzers(self, model: HookedTransformer, tokenizer) -> list:
        variants = {} if self.variants is None else {"variants": self.variants}
        own = [] if missing_parts(model, ["blocks"]) else [
            VariantCollapse.for_model(
                model,
                per_batch=self.per_batch,
                max_sentences=self.max_sentences,
                **variants,
            )]
        return [
            *own,
            PathCollapse.for_model(
                model,
                n_paths=self.n_paths,
                per_batch=self.per_batch,
                max_sentences=self.path_sentences,
            ),
        ]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        variants = next((a for a in analyzers if isinstance(a, VariantCollapse)), None)
        (paths,) = [a for a in analyzers if isinstance(a, PathCollapse)]
        output = write_pretrained_collapse(variants, paths, out_dir, formats, self.title)
        missing = missing_parts(model, ["blocks"])
        if missing:
            note = left_out_note("the block variants (the model rebuilt without skips, MLPs "
                                 "or norms)", missing)
            output.summary = "\n\n".join(filter(None, [output.summary, note]))
        return output
