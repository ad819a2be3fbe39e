"""The `attnlens analyze` pipeline: one corpus pass feeding every section, then files."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from attnlens.analysis.runner import run_analyzers
from attnlens.checkpointing import AnalysisCheckpoint
from attnlens.data.batch import Batch
from attnlens.model.transformer import HookedTransformer
from attnlens.report.asymmetry_section import AsymmetrySection
from attnlens.report.collapse_section import CollapseSection
from attnlens.report.heads_section import HeadRolesSection
from attnlens.report.html import write_html_report
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.spectrum_section import SpectrumSection
from attnlens.report.writer import atomic_open, check_output_dir


def default_sections() -> list[Section]:
    """Every section `attnlens analyze` runs, in report order."""
    return [
        HeadRolesSection(),
        SpectrumSection(low_rank_cost=False),  # eigenvectors: `attnlens spectrum` has them
        AsymmetrySection(),
        CollapseSection(),
    ]


def analyze(
    model: HookedTransformer,
    tokenizer,
    batches: Sequence[Batch],
    out_dir: str | Path,
    sections: Sequence[Section] | None = None,
    formats: tuple[str, ...] = ("png",),
    show_progress: bool = True,
    corpus_name: str = "",
    checkpoint: AnalysisCheckpoint | None = None,
) -> list[SectionOutput]:
    """Run all sections' analyzers in one pass over ``batches`` and write their outputs.

    ``checkpoint`` saves the analyzers' states every N sentences and, when resuming,
    restores them and skips the batches they already hold.
    """
    out = check_output_dir(out_dir)
    sections = list(default_sections() if sections is None else sections)
    start = time.perf_counter()
    per_section = [s.analyzers(model, tokenizer) for s in sections]
    everything = [a for group in per_section for a in group]
    n_sentences = sum(int(b.input_ids.shape[0]) for b in batches)
    if everything:
        stream = batches if checkpoint is None else checkpoint.wrap(batches, everything)
        run_analyzers(model, stream, everything, total=n_sentences, show_progress=show_progress)
    outputs = [
        section.write(model, group, out, formats)
        for section, group in zip(sections, per_section, strict=True)
    ]
    meta = {
        "model": model.cfg.source.get("name") or model.cfg.source.get("path", ""),
        "architecture": model.cfg.source.get("architecture", ""),
        "corpus": corpus_name,
        "sentences": n_sentences,
        "seconds": round(time.perf_counter() - start, 2),
        "layers_and_heads_numbered_from": 0,
    }
    with atomic_open(out / "run.json") as handle:
        json.dump(meta, handle, indent=2)
    write_html_report(outputs, out / "index.html", meta)
    return outputs
