"""Report section: token-level attention statistics per head."""

from __future__ import annotations

from pathlib import Path

from attnlens.analysis.attention_stats import MEASURES, AttentionStats
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_head_heatmap
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.writer import save_figure, write_table

TITLES = {
    "entropy": "Mean attention entropy (nats)",
    "confidence": "Confidence: mean max attention weight",
    "distance": "Mean attention distance (tokens)",
    "to_cls": "Mean attention to [CLS]",
    "to_sep": "Mean attention to [SEP]",
}


class AttentionStatsSection(Section):
    name = "attention_stats"
    title = "Attention statistics"

    def analyzers(self, model: HookedTransformer, tokenizer) -> list[AttentionStats]:
        return [AttentionStats.for_model(model, tokenizer)]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (stats,) = [a for a in analyzers if isinstance(a, AttentionStats)]
        table = stats.result()["attention_stats"]
        output = SectionOutput(self.title, tables={"attention_stats": table})
        write_table(table, out_dir, "attention_stats")
        for measure in MEASURES:
            rows = table[table["measure"] == measure]
            fig = layer_head_heatmap(rows, TITLES[measure])
            output.figures += save_figure(fig, out_dir, f"attention_{measure}", formats)
        wide = table.pivot_table(index="measure", values="value", aggfunc=["min", "mean", "max"])
        wide.columns = ["min", "mean", "max"]
        output.summary = "Range over heads:\n\n" + wide.reset_index().to_string(index=False)
        return output
