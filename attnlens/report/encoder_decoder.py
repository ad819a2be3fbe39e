"""Report sections on an encoder-decoder model: every section per attention type, one pass.

``by_attention_type(section)`` wraps a section so that it runs on each attention type it
applies to (``SECTION_ATTENTION``), seeing each type as a plain stack (``AttentionView``);
its analyzers are tagged with the type, so the one corpus pass of ``report.analyze`` feeds
them all. Each table is written once, with an ``attention`` column saying which type every
row describes (each type's own copy, written first, is overwritten by the combined table);
each type's figures are written as ``<attention>_<figure>`` (for instance
``cross_heads_entropy.svg``) and labelled with the type in their top-left corner
(``io.figure_naming``, which also works when a figure pool draws them later).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from attnlens.model.encoder_decoder import ATTENTION_TYPES
from attnlens.model.protocol import AttentionModel
from attnlens.report.catalog import FigureDoc, SectionDoc
from attnlens.report.sections import Section, SectionOutput
from attnlens.runs.io import figure_naming, write_table
from attnlens.stream.attention_types import with_attention_column
from attnlens.stream.attention_view import attention_views
from attnlens.stream.base import Analyzer

# Which attention types each section describes (others: all three). Query/key asymmetry
# compares P with P^T, meaningless when queries and keys are different sequences; rank
# collapse reruns whole blocks of a single stack (its block variants), which an
# encoder-decoder model has no view for: the section is left out there. Rollout multiplies a
# stack's square [query, key] matrices layer after layer, which cross-attention's keys (the
# encoder's output, the same at every layer) do not form. Sparse coverage (its sets and its
# random baseline count the visible keys: i + 1 under a causal mask) and linear attention
# (causal sums in causal stacks) run on all three. The language-model heads' probes and
# ablations run whole models on token sequences of their own, which a stack's view cannot.
SECTION_ATTENTION: dict[str, tuple[str, ...]] = {
    "asymmetry": ("encoder", "decoder"),
    "collapse": (),
    "rollout": ("encoder", "decoder"),
    "lm_heads": (),
}
# Why a section left out of encoder-decoder models is (its page note).
LEFT_OUT = {"collapse": "it reruns the blocks of a single stack",
            "lm_heads": "its probes and ablations run a single stack on sequences of its own"}
ATTENTION_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (causal)",
    "cross": "cross-attention (decoder queries, encoder keys)",
}


def section_attention(section: Section) -> tuple[str, ...]:
    return SECTION_ATTENTION.get(section.name, ATTENTION_TYPES)


def figure_name(attention: str, name: str) -> str:
    """The file name (without suffix) of one attention type's copy of a figure."""
    return f"{attention}_{name}"


def doc_by_attention(doc: SectionDoc, attentions: tuple[str, ...]) -> SectionDoc:
    """``doc`` with every figure listed once per attention type, captioned with the type."""
    figures = tuple(
        FigureDoc(figure_name(attention, f.name), f"{ATTENTION_TITLES[attention]}: {f.caption}")
        for f in doc.figures
        for attention in attentions
    )
    return dataclasses.replace(doc, figures=figures)


class AttentionTypeSection(Section):
    """One section run on each attention type of an encoder-decoder model it applies to."""

    def __init__(self, section: Section) -> None:
        self.section = section
        self.name, self.title = section.name, section.title
        self.needs_corpus = section.needs_corpus
        self.null_control = getattr(section, "null_control", False)
        self.attentions = section_attention(section)
        self.doc = doc_by_attention(section.doc, self.attentions)
        self.views: dict = {}

    def analyzers(self, model: AttentionModel, tokenizer) -> list[Analyzer]:
        self.views = attention_views(model)
        tagged = []
        for attention in self.attentions:
            for analyzer in self.section.analyzers(self.views[attention], tokenizer):
                analyzer.attention = attention
                tagged.append(analyzer)
        return tagged

    def write(
        self,
        model: AttentionModel,
        analyzers: list[Analyzer],
        out_dir: Path,
        formats: tuple[str, ...],
    ) -> SectionOutput:
        if not self.attentions:
            why = LEFT_OUT.get(self.name, "it needs a single stack")
            note = f"{self.title}: not computed on encoder-decoder models ({why})."
            return SectionOutput(self.title, summary=note, notes=[note])
        views = self.views or attention_views(model)
        written = {}
        name = model.cfg.source.get("name", "")
        for attention in self.attentions:
            group = [a for a in analyzers if a.attention == attention]
            label = f"{name}: {ATTENTION_TITLES[attention]}"
            with figure_naming(figure_name(attention, ""), label):
                written[attention] = self.section.write(views[attention], group, Path(out_dir),
                                                        formats)
        return combine_outputs(self.title, written, Path(out_dir))


def by_attention_type(section: Section) -> AttentionTypeSection:
    return AttentionTypeSection(section)


def combine_outputs(title: str, written: dict[str, SectionOutput], out: Path) -> SectionOutput:
    """One section output: tables stacked with an ``attention`` column, every type's figures."""
    tables = with_attention_column({a: o.tables for a, o in written.items()})
    for table_name, table in tables.items():
        write_table(table, out, table_name)
    figures = [path for output in written.values() for path in output.figures]
    summary = "\n\n".join(
        f"[{ATTENTION_TITLES[a]}]\n{o.summary}".rstrip() for a, o in written.items()
    )
    notes = [
        f"{ATTENTION_TITLES[a]}: {line}"
        for a, o in written.items()
        for line in (o.notes or [s.strip() for s in o.summary.splitlines()
                                 if s.strip() and not s.lstrip().startswith("|")])
    ]
    return SectionOutput(title, tables=tables, figures=figures, summary=summary, notes=notes)
