"""Viewer pages of a report's example sentences, so each head card can open the viewer.

``write_example_pages(model, tokenizer, report_dir)`` reads ``tables/head_examples.csv``,
chooses at most ``MAX_PAGES`` sentences (greedily, the one holding most heads' first
examples first, so that as many heads as possible get a link), writes one viewer page per
sentence as ``examples/sentence-<index>.html`` (one text per page, the viewer's contract;
with the report's role badges when the viewer offers them) and records each example's page
in the table's ``viewer_page`` column (empty where no page was written). The head card links
to ``<page>#layer=L&head=H&view=text&query=Q&key=K``: the viewer opens on that sentence with
the head selected and the example's query token pinned. ``start_example_pages`` does the
same in two steps (the column first, ``PendingPages.finish()`` the pages: `analyze` renders
the report page in a forked child meanwhile).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class PendingPages:
    """Example pages whose sentences are chosen and recorded in the table: ``count`` of them;
    ``finish()`` runs their forward passes, writes them and returns their paths."""

    count: int
    finish: Callable[[], list[Path]]


def write_example_pages(model, tokenizer, report_dir: str | Path, max_pages: int = MAX_PAGES,
                        max_length: int | None = None) -> list[Path]:
    """Write the pages and the ``viewer_page`` column (module docstring); return the pages.
    ``max_length`` None: the model's trained length (the viewer's default)."""
    return start_example_pages(model, tokenizer, report_dir, max_pages, max_length).finish()


def start_example_pages(model, tokenizer, report_dir: str | Path, max_pages: int = MAX_PAGES,
                        max_length: int | None = None) -> PendingPages:
    """Choose the sentences and write the table's ``viewer_page`` column now; the pages are
    written by ``finish()`` (`analyze` renders the report meanwhile: it reads the table,
    never the pages)."""
    report = Path(report_dir)
    texts = _chosen_texts(report, max_pages)
    roles = _roles(report) if texts else None
    return PendingPages(len(texts), functools.partial(
        _write_pages, model, tokenizer, report, texts, roles, max_length))


def _chosen_texts(report: Path, max_pages: int) -> dict[int, str]:
    """The chosen sentences' texts by index, recorded as pages in ``head_examples.csv``
    (unchanged where it is missing, empty or an encoder-decoder's)."""
    from attnlens.runs.io import write_table

    table_path = report / "tables" / "head_examples.csv"
    if not table_path.is_file():
        return {}
    examples = pd.read_csv(table_path, keep_default_na=False, na_values=[""])
    if examples.empty or "attention" in examples.columns:  # encoder-decoder: no one text
        return {}
    texts = examples.drop_duplicates("sentence_index").set_index("sentence_index")["sentence"]
    chosen = {index: str(texts.get(index, "") or "")
              for index in choose_sentences(examples, max_pages)}
    chosen = {index: text for index, text in chosen.items() if text.strip()}
    written = {index: page_name(index) for index in chosen}
    examples["viewer_page"] = examples["sentence_index"].map(written).fillna("")
    formats = ("csv", "md") if (table_path.with_suffix(".md")).exists() else ("csv",)
    write_table(examples, table_path.parent, "head_examples", formats=formats)
    return chosen


def _write_pages(model, tokenizer, report: Path, texts: dict[int, str], roles,
                 max_length: int | None) -> list[Path]:
    """Each chosen sentence's viewer page (one forward pass each); their paths."""
    from attnlens.viewer.data import text_attention
    from attnlens.viewer.page import AttentionView

    paths = []
    for index, text in texts.items():
        data = text_attention(model, tokenizer, text, max_length=max_length)
        if roles is not None:
            data.roles = roles
        path = report / page_name(index)
        path.parent.mkdir(exist_ok=True)
        paths.append(AttentionView(data).save(path))
    return paths


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
