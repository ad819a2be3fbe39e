"""Report sections on an encoder-decoder model: every section per attention type, one pass.

Each section runs on the attention types it applies to (``SECTION_ATTENTION``), seeing each
type as a plain stack (``AttentionView``); its analyzers are tagged with the type and all of
them are fed by one corpus pass. Each type's figures go to a subfolder named after it
(``encoder/``, ``decoder/``, ``cross/``); each table is written once, at the top, with an
``attention`` column saying which type every row describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlens.analysis.attention_types import with_attention_column
from attnlens.analysis.runner import run_analyzers
from attnlens.data.batch import Batch
from attnlens.model.attention_view import attention_views
from attnlens.model.encoder_decoder import ATTENTION_TYPES, EncoderDecoderTransformer
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.writer import figure_label, write_table

# Which attention types each section describes (others: all three). Query/key asymmetry
# compares P with P^T, meaningless when queries and keys are different sequences; rank
# collapse reruns a stack on its own, which only the encoder can do.
SECTION_ATTENTION = {
    "asymmetry": ("encoder", "decoder"),
    "collapse": ("encoder",),
}
ATTENTION_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (causal)",
    "cross": "cross-attention (decoder queries, encoder keys)",
}


def section_attention(section: Section) -> tuple[str, ...]:
    return SECTION_ATTENTION.get(section.name, ATTENTION_TYPES)


def analyze_encoder_decoder(
    model: EncoderDecoderTransformer,
    tokenizer,
    batches: Sequence[Batch],
    out: Path,
    sections: Sequence[Section],
    formats: tuple[str, ...] = ("png",),
    show_progress: bool = True,
) -> list[SectionOutput]:
    """Run ``sections`` on every attention type they apply to; write combined tables."""
    views = attention_views(model)
    per_section: list[dict[str, list]] = []
    for section in sections:
        groups = {}
        for attention in section_attention(section):
            analyzers = section.analyzers(views[attention], tokenizer)
            for analyzer in analyzers:
                analyzer.attention = attention
            groups[attention] = analyzers
        per_section.append(groups)
    everything = [a for groups in per_section for group in groups.values() for a in group]
    n_sentences = sum(int(b.input_ids.shape[0]) for b in batches)
    if everything:
        run_analyzers(model, batches, everything, total=n_sentences, show_progress=show_progress)
    outputs = []
    for section, groups in zip(sections, per_section, strict=True):
        written = {}
        for attention, analyzers in groups.items():
            with figure_label(f"{model.cfg.source.get('name', '')}: {ATTENTION_TITLES[attention]}"):
                written[attention] = section.write(views[attention], analyzers, out / attention,
                                                   formats)
        outputs.append(combine_outputs(section.title, written, out))
    return outputs


def combine_outputs(title: str, written: dict[str, SectionOutput], out: Path) -> SectionOutput:
    """One section output: tables stacked with an ``attention`` column, every type's figures."""
    tables = with_attention_column({a: o.tables for a, o in written.items()})
    for attention, output in written.items():  # the per-type copies lack the column
        for name in output.tables:
            for suffix in (".csv", ".md"):
                (out / attention / f"{name}{suffix}").unlink(missing_ok=True)
    for name, table in tables.items():
        write_table(table, out, name)
    figures = [path for output in written.values() for path in output.figures]
    summary = "\n\n".join(
        f"[{ATTENTION_TITLES[a]}]\n{o.summary}".rstrip() for a, o in written.items()
    )
    return SectionOutput(title, tables=tables, figures=figures, summary=summary)
