"""Issue 29 (null35): the null-model pass without work no null column reads, same columns.

The pass it replaced (every ``null_control`` section's whole ``write`` on the null model,
every forward to the end) is kept here as it was and run beside ``run_null``: every table
the new pass makes is the old one exactly, and each table it leaves out could give no null
column (``join_null``'s rules).
"""

from __future__ import annotations

import pandas as pd
import pytest

import attnlens.loaders.random_init as random_init
import attnlens.measures.heads.section as heads_section
from attnlens.data.corpus import load_corpus
from attnlens.data.tokenizer import Tokenizer
from attnlens.distributed import DistContext
from attnlens.loaders import load_model
from attnlens.loaders.checkpoint import default_model_path
from attnlens.measures.rollout.section import RolloutSection
from attnlens.report.analyze import default_sections
from attnlens.report.catalog import TableDoc
from attnlens.report.null_run import (
    NullOptions,
    null_value_column,
    run_null,
)
from attnlens.stats.null import add_null_columns
from tests.null_pass_before import run_null_before

OPTIONS = NullOptions("random-init", max_sentences=8)
LEFT_OUT = {"role_tests", "head_roles", "head_roles_uncorrected", "role_evidence",
            "role_evidence_uncorrected", "syntactic_heldout", "syntactic_table1", "rollout",
            "flow", "head_distances", "head_embedding"}


# Helpers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm():
    """The embedded model, its tokenizer and 16 sentences of the sample treebank in batches
    of 4 (the null sample of 8 cuts each batch to 2)."""
    model = load_model()
    tokenizer = Tokenizer.from_pretrained(default_model_path())
    batches = load_corpus(max_sentences=16).batches(tokenizer, batch_size=4)
    return model, tokenizer, batches


def _sections() -> list:
    """The report's sections, rollout with attention flow (`attnlens rollout --method
    flow`), heads with head clustering (`attnlens heads`)."""
    sections = default_sections()
    for section in sections:
        if section.name == "heads":
            section.clusters = None
    return [RolloutSection(method="flow", sentences=2) if s.name == "rollout" else s
            for s in sections]


def _could_join(doc: TableDoc, table: pd.DataFrame) -> bool:
    """Whether ``join_null`` could give a table like ``table`` null columns (the table
    standing for the model's own, which has the same columns)."""
    if "layer" not in table.columns:
        return False
    value = null_value_column(table, doc.null)
    return value is not None and "null_high" in add_null_columns(table, table, value,
                                                                 doc.keys).columns


# Tests --------------------------------------------------------------------------------------
def test_the_null_pass_makes_the_old_passs_tables_that_null_columns_come_from(
        minilm, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "0")
    model, tokenizer, batches = minilm
    old = run_null_before(model, tokenizer, batches, _sections(), OPTIONS)
    new = run_null(model, tokenizer, batches, _sections(), OPTIONS, DistContext())
    assert new.sections == old.sections and new.sentences == 8
    assert set(new.tables) == set(old.tables) - LEFT_OUT
    assert LEFT_OUT - {"syntactic_heldout", "syntactic_table1"} <= set(old.tables) - set(
        new.tables)  # flow, kept sentences, clustering and role tests were made before
    for name, table in new.tables.items():
        pd.testing.assert_frame_equal(table, old.tables[name], check_exact=True)
    sections = [s for s in _sections() if s.null_control]
    joined = [name for name, table in old.tables.items()
              if _could_join(_doc(sections, name), table)]
    assert {"head_stats", "positional_heads", "syntactic_accuracy", "rollout_layers",
            "sparse_coverage", "linear_attention"} <= set(joined)
    assert not set(joined) & LEFT_OUT  # no null column could come from a left-out table


def _doc(sections: list, name: str) -> TableDoc:
    """Table ``name``'s doc in the section that lists it (the default doc otherwise)."""
    return next((t for s in sections for t in s.doc.tables if t.name == name), TableDoc(name))


def test_the_null_pass_neither_tests_roles_nor_selects_held_out_heads(
        minilm, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "0")

    def refused(*args, **kwargs):
        raise AssertionError("run on the null model")

    monkeypatch.setattr(heads_section, "role_tests", refused)
    monkeypatch.setattr(heads_section, "classify_heads", refused)
    monkeypatch.setattr(heads_section.HeadRolesSection, "_held_out", refused)
    model, tokenizer, batches = minilm
    heads = [s for s in default_sections() if s.name == "heads"]
    result = run_null(model, tokenizer, batches, heads, OPTIONS, DistContext())
    assert {"head_stats", "positional_heads", "syntactic_best", "rare_words"} <= set(
        result.tables)


def test_the_null_forwards_stop_before_the_last_layers_mlp(minilm, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "0")
    real_copy = random_init.random_init_copy
    calls = {"last": 0, "first": 0}

    def counted_copy(model, seed=0):
        null = real_copy(model, seed)
        blocks = null.model.blocks
        for key, block in (("first", blocks[0]), ("last", blocks[-1])):
            block.mlp.register_forward_hook(
                lambda *args, key=key: calls.__setitem__(key, calls[key] + 1))
        return null

    monkeypatch.setattr(random_init, "random_init_copy", counted_copy)
    model, tokenizer, batches = minilm
    run_null(model, tokenizer, batches, default_sections(), OPTIONS, DistContext())
    assert calls == {"first": 4, "last": 0}  # four cut batches: layer 0's MLP ran for each
