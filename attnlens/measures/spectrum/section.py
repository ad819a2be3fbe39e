"""Report section: how low-rank attention is (corpus) and how the heads' weights are spread."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.measures.circuits.circuits import circuit_tables
from attnlens.measures.circuits.shared_subspace import shared_subspace_tables
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer
from attnlens.model.head_ids import renumber_tables
from attnlens.model.protocol import left_out_note, missing_parts
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import cumulative_curves_by_layer, layer_head_heatmap, shared_subspace_curves
from attnlens.report.catalog import CardItem, FigureDoc, SectionDoc, TableDoc
from attnlens.report.papers import CORDONNIER, LINFORMER
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.side_work import SideJob, side_job
from attnlens.runs.io import save_figure, write_table

# What the weight spectra read from the model (attnlens.model.protocol.PARTS).
WEIGHT_PARTS = ("QK", "OV", "norm")
# `attnlens analyze` reads the exact spectra of a sample of the corpus only
# (`--spectrum-sentences`): they cost more than every other analyzer together.
REPORT_SENTENCES = 256
SAMPLE_NOTE = (" In `attnlens analyze`: --spectrum-sentences sentences of the corpus, evenly "
               f"spaced by corpus index ({REPORT_SENTENCES} by default).")

SPECTRUM = SectionDoc(
    about=(
        "How low-rank each head's attention matrices are. For the n x n attention matrix P "
        "of a sentence, C(k) is the share of the sum of singular values held by the k "
        "largest (Linformer's normalised cumulative spectrum); C(n/4) near 1 means a rank-n/4 "
        "projection loses little. The weight part counts the dimensions each head's "
        "W_Q W_K^T uses, and how much the heads of a layer share them (Cordonnier et al.)."
    ),
    papers=(LINFORMER, CORDONNIER),
    command="attnlens spectrum",
    tables=(
        TableDoc("spectrum_summary", "Per head: C(n/4), effective rank and the ranks holding "
                 "90 % and 99 % (also as fractions of n)." + SAMPLE_NOTE,
                 pivot=("measure", "value")),
        TableDoc("spectrum_curve", "C(k) at k/n = 0.05 .. 1, per head." + SAMPLE_NOTE,
                 pivot=("fraction", "value"), keys=("fraction",)),
        TableDoc("spectrum_curve_by_length", "C(k) at absolute k per sentence-length bucket."
                 + SAMPLE_NOTE, keys=("k", "sentences")),
        TableDoc("low_rank_cost", "Errors of rank-k truncations and of random Linformer "
                 "projections.", keys=("k_fraction",)),
        TableDoc("circuit_summary", "Spectra summaries of every head's QK and OV circuit "
                 "(rotary models: QK at relative offset 0, and *_offsets_mean the mean of "
                 "each measure over offsets).", pivot=("measure", "value")),
        TableDoc("circuit_spectra", "Every singular value of every head's QK and OV circuit "
                 "(rotary models: QK at relative offset 0, QK_offsets_mean the mean over "
                 "offsets).", keys=("index",)),
        TableDoc("shared_subspace_dims", "Dimensions holding 90/95/99 % of the energy: all "
                 "heads of a layer together against each head alone (rotary models: W_QK "
                 "at relative offset 0).", keys=("energy",), null="dims"),
        TableDoc("shared_subspace_curve", "Cumulative energy against dimensions, per layer.",
                 keys=("k",)),
    ),
    figures=(
        FigureDoc("spectrum_at_quarter", "C(n/4) per head: the share of the singular-value "
                  "sum in the top quarter."),
        FigureDoc("spectrum_curves", "C(k) against k/n per layer (band: min..max over heads)."),
        FigureDoc("spectrum_output_error", "Relative error of the head output at rank n/4."),
        FigureDoc("shared_subspace", "Shared query/key subspaces: all heads of a layer "
                  "(solid) against one head (dashed)."),
        FigureDoc("qk_effective_rank", "Effective rank of each head's W_Q W_K^T."),
    ),
    card=(
        CardItem("spectrum_summary", "Spectrum", kind="measures"),
        CardItem("spectrum_curve", "Cumulative singular values C(k) against k/n", kind="curve",
                 x="fraction"),
        CardItem("circuit_summary", "QK and OV circuits", kind="measures"),
    ),
)

def _range_line(table: pd.DataFrame, measure: str, label: str) -> str:
    values = table[table["measure"] == measure]["value"]
    spread = f"heads range {values.min():.3f} .. {values.max():.3f}"
    return f"{label}: mean {values.mean():.3f} ({spread})"


def spectrum_summary_text(tables: dict[str, pd.DataFrame], sentences: int, mean_n: float,
                          unsampled: int = 0) -> str:
    """A few lines a reader can quote: the corpus-wide figures of the spectrum tables
    (``unsampled``: the corpus's sentences outside the bounded sample)."""
    summary = tables["spectrum_summary"]
    sample = (f" (of the corpus's {sentences + unsampled}, evenly spaced by corpus index: "
              "--spectrum-sentences)" if unsampled else "")
    lines = [
        f"{sentences} sentences{sample}, mean {mean_n:.1f} real tokens; "
        "energy = share of the sum of singular values.",
        _range_line(summary, "cum_at_quarter", "cumulative share at k = n/4"),
        _range_line(summary, "effective_rank_frac", "effective rank / n"),
        _range_line(summary, "rank90_frac", "rank at 90% / n"),
        _range_line(summary, "rank99_frac", "rank at 99% / n"),
    ]
    cost = tables.get("low_rank_cost")
    if cost is not None:
        for fraction, rows in cost.groupby("k_fraction"):
            means = rows.groupby("measure")["value"].mean()
            lines.append(
                f"k = ceil({fraction:g} n): P error {means['p_error']:.3f}, "
                f"output error {means['output_error']:.3f}, "
                f"Linformer random-projection RMS error {means['linformer_error']:.3f} "
                "(means over heads)"
            )
    return "\n".join(lines)


def weight_summary_text(dims: pd.DataFrame, d_model: int) -> str:
    rows = dims[(dims["energy"] == 0.9)]
    lines = [f"dimensions holding 90% of the energy (sum s^2), d_model = {d_model}:"]
    for matrix, part in rows.groupby("matrix", sort=False):
        concat = part[part["scope"] == "concat"]["dims"]
        summed = part[part["scope"] == "sum_of_heads"]["dims"]
        lines.append(
            f"  {matrix}: all heads together {concat.min():.0f} .. {concat.max():.0f} per layer, "
            f"sum of the heads' own counts {summed.min():.0f} .. {summed.max():.0f}"
        )
    return "\n".join(lines)


def weight_spectra_tables(model: HookedTransformer) -> dict[str, pd.DataFrame]:
    """The circuit spectra (QK/OV) and shared-subspace tables: ``model``'s weights alone,
    heads by their original numbers."""
    return renumber_tables({**circuit_tables(model), **shared_subspace_tables(model)}, model)


def write_weight_spectra(
    model: HookedTransformer, out_dir: Path, formats: tuple[str, ...], output: SectionOutput,
    tables: dict[str, pd.DataFrame] | None = None,
) -> None:
    """Circuit spectra (QK/OV) and shared-subspace tables and figure (no corpus needed):
    ``tables`` when given (``weight_spectra_tables`` computed beside the pass), else computed.

    Left out, with a note saying why, when the model cannot give its per-head weights.
    """
    missing = missing_parts(model, WEIGHT_PARTS)
    if missing:
        note = left_out_note("the QK/OV circuit spectra and shared subspaces", missing)
        output.summary = "\n".join(filter(None, [output.summary, note]))
        return
    tables = weight_spectra_tables(model) if tables is None else tables
    for name, table in tables.items():
        write_table(table, out_dir, name)
    output.tables.update(tables)
    fig = partial(  # a recipe: built and drawn in a figure worker
        shared_subspace_curves,
        tables["shared_subspace_curve"],
        model.cfg.d_model,
        "Shared query/key subspaces: all heads of a layer (solid) vs one head (dashed)",
    )
    output.figures += save_figure(fig, out_dir, "shared_subspace", formats)
    qk_rank = tables["circuit_summary"].query("circuit == 'QK' and measure == 'effective_rank'")
    fig = partial(
        layer_head_heatmap, qk_rank, "Effective rank of each head's W_Q W_K^T", fmt="{:.1f}"
    )
    output.figures += save_figure(fig, out_dir, "qk_effective_rank", formats)
    output.summary += "\n" + weight_summary_text(tables["shared_subspace_dims"], model.cfg.d_model)


class SpectrumSection(Section):
    """Singular-value spectra of attention matrices, low-rank costs, shared subspaces."""

    name = "spectrum"
    title = "Attention spectrum (low rank) and shared subspaces"
    doc = SPECTRUM
    null_control = True

    def __init__(self, low_rank_cost: bool = True, top_k: int = 0, top_k_min_n: int = 1024,
                 max_sentences: int | None = None) -> None:
        self.low_rank_cost = low_rank_cost
        self.top_k, self.top_k_min_n = top_k, top_k_min_n  # long inputs: top-k spectra only
        self.max_sentences = max_sentences  # N sentences spread over the corpus (None: all)
        self._beside: tuple[HookedTransformer, SideJob] | None = None

    def start_beside(self, model: HookedTransformer, forked: bool) -> SideJob | None:
        """The weight spectra (``weight_spectra_tables``, the same bits at one thread) in a
        forked process beside the corpus pass; ``write`` on this very model takes them (the
        null model's are computed when its tables are)."""
        if not forked or missing_parts(model, WEIGHT_PARTS):
            return None
        job = side_job("weight spectra", partial(weight_spectra_tables, model), forked)
        self._beside = model, job
        return job

    def _weight_tables(self, model: HookedTransformer) -> dict[str, pd.DataFrame] | None:
        """The weight spectra computed beside the pass for ``model`` (waiting for them), or
        None (none started for it: ``write_weight_spectra`` computes them)."""
        if self._beside is None or self._beside[0] is not model:
            return None
        return self._beside[1].result()

    @classmethod
    def for_report(cls, max_sentences: int | None = REPORT_SENTENCES) -> SpectrumSection:
        """Without the low-rank cost (its eigenvectors): `attnlens spectrum` has it; over
        ``max_sentences`` sentences evenly spaced by corpus index (``--spectrum-sentences``)."""
        return cls(low_rank_cost=False, max_sentences=max_sentences)

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[SpectrumAnalyzer]:
        return [SpectrumAnalyzer.for_model(model, low_rank_cost=self.low_rank_cost,
                                           top_k=self.top_k, top_k_min_n=self.top_k_min_n,
                                           max_sentences=self.max_sentences)]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (spectrum,) = [a for a in analyzers if isinstance(a, SpectrumAnalyzer)]
        tables = renumber_tables(spectrum.result(), model)  # original head numbers
        for name, table in tables.items():
            write_table(table, out_dir, name)
        output = SectionOutput(self.title, tables=dict(tables))
        if "spectrum_summary" not in tables:  # every sentence was long: top-k table only
            output.summary = f"{spectrum.top_sentences} long sentences: top-{spectrum.top_k} only"
            write_weight_spectra(model, out_dir, formats, output, self._weight_tables(model))
            return output
        summary = tables["spectrum_summary"]
        fig = partial(  # a recipe: built and drawn in a figure worker
            layer_head_heatmap,
            summary[summary["measure"] == "cum_at_quarter"],
            "Cumulative singular-value share at k = n/4",
            vmin=0,
            vmax=1,
        )
        output.figures += save_figure(fig, out_dir, "spectrum_at_quarter", formats)
        fig = partial(  # a recipe: built and drawn in a figure worker
            cumulative_curves_by_layer,
            tables["spectrum_curve"], "Normalised cumulative singular values of attention"
        )
        output.figures += save_figure(fig, out_dir, "spectrum_curves", formats)
        if "low_rank_cost" in tables:
            cost = tables["low_rank_cost"]
            quarter = cost[(cost["measure"] == "output_error") & (cost["k_fraction"] == 0.25)]
            if not quarter.empty:
                fig = partial(  # a recipe: built and drawn in a figure worker
                    layer_head_heatmap,
                    quarter, "Relative error of the head output P V at rank n/4", vmin=0
                )
                output.figures += save_figure(fig, out_dir, "spectrum_output_error", formats)
        output.summary = spectrum_summary_text(tables, spectrum.sentences, spectrum.mean_length,
                                               spectrum.unsampled)
        write_weight_spectra(model, out_dir, formats, output, self._weight_tables(model))
        return output
