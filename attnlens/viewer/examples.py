"""Viewer pages of a report's example sentences, so each head card can open the viewer.

``write_example_pages(model, tokenizer, report_dir)`` reads ``tables/head_examples.csv``,
chooses at most ``MAX_PAGES`` sentences (greedily, the one holding most heads' first
examples first, so that as many heads as possible get a link), writes one viewer page per
sentence as ``examples/sentence-<index>.html`` (one text per page, the viewer's contract;
with the report's role badges when the viewer offers them) and records each example's page
in the table's ``viewer_page`` column (empty where no page was written). The head card links
to ``<page>#layer=L&head=H&view=text&query=Q&key=K``: the viewer opens on that sentence with
the head selected and the example's query token pinned.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

MAX_PAGES = 12  # a short sentence's page is about 100-150 KB (MiniLM)
EXAMPLES_DIR = "examples"


def choose_sentences(examples: pd.DataFrame, max_pages: int = MAX_PAGES) -> list[int]:
    """Sentence indices to give pages: greedy cover of the (head, measure) first examples,
    then of every example, at most ``max_pages``."""
    chosen: list[int] = []
    for ranks in ((1,), None):
        rows = examples if ranks is None else examples[examples["rank"].isin(ranks)]
        todo = {(r.layer, r.head, r.measure, r.rank): int(r.sentence_index)
                for r in rows.itertuples()}
        todo = {k: v for k, v in todo.items() if v not in chosen}
        while todo and len(chosen) < max_pages:
            counts = pd.Series(list(todo.values())).value_counts()
            best = int(counts.sort_index().idxmax())  # most examples; ties: lowest index
            chosen.append(best)
            todo = {k: v for k, v in todo.items() if v != best}
    return chosen


def page_name(index: int) -> str:
    return f"{EXAMPLES_DIR}/sentence-{index}.html"


def write_example_pages(model, tokenizer, report_dir: str | Path, max_pages: int = MAX_PAGES,
                        max_length: int | None = None) -> list[Path]:
    """Write the pages and the ``viewer_page`` column (module docstring); return the pages.
    ``max_length`` None: the model's trained length (the viewer's default)."""
    from attnlens.runs.io import write_table
    from attnlens.viewer.data import text_attention
    from attnlens.viewer.page import AttentionView

    report = Path(report_dir)
    table_path = report / "tables" / "head_examples.csv"
    if not table_path.is_file():
        return []
    examples = pd.read_csv(table_path, keep_default_na=False, na_values=[""])
    if examples.empty or "attention" in examples.columns:  # encoder-decoder: no one text
        return []
    roles = _roles(report)
    texts = examples.drop_duplicates("sentence_index").set_index("sentence_index")["sentence"]
    written: dict[int, str] = {}
    for index in choose_sentences(examples, max_pages):
        text = str(texts.get(index, "") or "")
        if not text.strip():
            continue
        data = text_attention(model, tokenizer, text, max_length=max_length)
        if roles is not None:
            data.roles = roles
        path = report / page_name(index)
        path.parent.mkdir(exist_ok=True)
        AttentionView(data).save(path)
        written[index] = page_name(index)
    examples["viewer_page"] = examples["sentence_index"].map(written).fillna("")
    formats = ("csv", "md") if (table_path.with_suffix(".md")).exists() else ("csv",)
    write_table(examples, table_path.parent, "head_examples", formats=formats)
    return [report / p for p in written.values()]


def _roles(report: Path):
    """The report's role badges for the viewer, where the viewer shows them (else None)."""
    try:
        from attnlens.viewer.roles import (  # the viewer's role badges
            ROLE_TABLE,
            read_head_roles,
        )
    except ImportError:
        return None
    if not (report / "tables" / "head_roles.csv").is_file():
        return None
    # The pages are written while the report is a work folder (``.NAME.partial``) and are
    # moved with it: name the table as the report holds it, not by that passing path.
    return {**read_head_roles(report), "source": f"this report's tables/{ROLE_TABLE}"}
