"""Report section: head roles (positional, syntactic, rare-word) and Clark's statistics."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from attnlens.analysis.head_stats import HeadStats
from attnlens.analysis.positional import PositionalHeads
from attnlens.analysis.rare_words import RareWordHeads
from attnlens.analysis.roles import (
    classify_heads,
    relation_heatmaps,
    role_evidence,
    role_map_figure,
)
from attnlens.analysis.syntactic import MAIN_DIRECTIONS, SyntacticHeads
from attnlens.data.rarity import WordRarity
from attnlens.model.transformer import HookedTransformer
from attnlens.plots import layer_head_heatmap
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.writer import markdown_table, save_figure, write_table

STAT_FIGURES = {
    "confidence": "Confidence: mean max attention weight",
    "entropy": "Mean attention entropy (nats)",
    "distance": "Mean attention distance (tokens)",
    "to_cls": "Mean attention to [CLS]",
    "to_sep": "Mean attention to [SEP]",
    "to_punct": "Mean attention to punctuation (tokens)",
    "to_self": "Mean attention to the token itself",
    "to_prev": "Mean attention to the previous token",
    "to_next": "Mean attention to the next token",
}


def table_one(best: pd.DataFrame) -> pd.DataFrame:
    """Clark et al.'s Table 1: best head per relation and direction vs the offset baseline."""
    rows = best[best["direction"].isin(MAIN_DIRECTIONS)].copy()
    rows["head"] = rows["layer"].astype(str) + "-" + rows["head"].astype(str)
    rows["baseline"] = [f"{b:.3f} ({o:+d})" for b, o in zip(rows["baseline"],
                                                            rows["baseline_offset"], strict=True)]
    rows["accuracy"] = rows["accuracy"].map(lambda a: f"{a:.3f}")
    return rows[["relation", "direction", "examples", "head", "accuracy", "baseline",
                 "syntactic"]].rename(columns={"head": "best head (layer-head)",
                                               "baseline": "baseline (offset)"})


class HeadRolesSection(Section):
    name = "heads"
    title = "Head roles: positional, syntactic and rare-word heads"

    def __init__(
        self,
        positional_threshold: float = 0.9,
        min_examples: int = 20,
        margin: float = 0.10,
        rare_threshold: float = 0.5,
        rarity: WordRarity | None = None,
        base_relations: bool = False,
    ) -> None:
        self.positional_threshold, self.min_examples, self.margin = (
            positional_threshold, min_examples, margin)
        self.rare_threshold, self.rarity, self.base_relations = (
            rare_threshold, rarity, base_relations)

    def analyzers(self, model: HookedTransformer, tokenizer) -> list:
        return [
            HeadStats.for_model(model, tokenizer),
            PositionalHeads.for_model(model, threshold=self.positional_threshold),
            SyntacticHeads.for_model(model, min_examples=self.min_examples, margin=self.margin,
                                     base_relations=self.base_relations),
            RareWordHeads.for_model(model, rarity=self.rarity, threshold=self.rare_threshold),
        ]

    def write(self, model, analyzers, out_dir: Path, formats) -> SectionOutput:
        (stats,) = [a for a in analyzers if isinstance(a, HeadStats)]
        (positional,) = [a for a in analyzers if isinstance(a, PositionalHeads)]
        (syntactic,) = [a for a in analyzers if isinstance(a, SyntacticHeads)]
        (rare,) = [a for a in analyzers if isinstance(a, RareWordHeads)]
        tables: dict[str, pd.DataFrame] = {}
        for analyzer in (stats, positional, syntactic, rare):
            tables.update(analyzer.result())
        has_trees = not tables["syntactic_best"].empty
        has_words = rare.sentences > 0
        syn_acc = tables["syntactic_accuracy"] if has_trees else None
        rare_table = tables["rare_words"] if has_words else None
        tables["head_roles"] = classify_heads(tables["positional_heads"], syn_acc, rare_table)
        tables["role_evidence"] = role_evidence(tables["positional_heads"], syn_acc, rare_table)
        if has_trees:
            tables["syntactic_table1"] = table_one(tables["syntactic_best"])
        else:
            for name in ("syntactic_best", "syntactic_accuracy", "syntactic_baselines"):
                tables.pop(name)
        if not has_words:
            tables.pop("rare_words")
        for name, table in tables.items():
            write_table(table, out_dir, name)

        output = SectionOutput(self.title, tables=tables)
        # Recipes (partial): a worker process builds and draws each figure (figure_pool).
        figures = [("head_roles_map", partial(role_map_figure, tables["head_roles"]))]
        head_stats = tables["head_stats"]
        for measure, title in STAT_FIGURES.items():
            rows = head_stats[head_stats["measure"] == measure]
            figures.append((f"heads_{measure}", partial(layer_head_heatmap, rows, title)))
        figures.append(("positional_share", partial(layer_head_heatmap,
            tables["positional_heads"], "Share of tokens at the best offset (-3..+3)",
            value="share", vmin=0, vmax=1)))
        if has_words:
            figures.append(("rare_word_share", partial(layer_head_heatmap,
                tables["rare_words"], "Share of words attending most to the rarest word",
                value="share_rarest", vmin=0, vmax=1)))
        if has_trees:
            for direction in MAIN_DIRECTIONS:
                slug = direction.replace("->", "_to_")
                figures.append((f"syntactic_{slug}", partial(
                    relation_heatmaps, tables["syntactic_accuracy"], direction)))
        for name, fig in figures:
            output.figures += save_figure(fig, out_dir, name, formats)
        output.summary = self._summary(tables, has_trees, has_words)
        return output

    def _summary(self, tables: dict[str, pd.DataFrame], has_trees: bool, has_words: bool) -> str:
        roles = tables["head_roles"]["roles"]
        counts = {r: int(roles.str.contains(r).sum()) for r in ("positional", "syntactic", "rare")}
        lines = [
            f"Heads with a role (layers and heads from 0): positional {counts['positional']}, "
            f"syntactic {counts['syntactic']}, rare-word {counts['rare']} "
            f"of {len(roles)} heads."
        ]
        if has_trees:
            lines += ["", "Best head per relation (Clark et al. Table 1 format):", "",
                      markdown_table(tables["syntactic_table1"])]
        else:
            lines.append("No dependency trees in the corpus: syntactic heads not measured.")
        if not has_words:
            lines.append("No word-split corpus: rare-word heads not measured.")
        return "\n".join(lines)
