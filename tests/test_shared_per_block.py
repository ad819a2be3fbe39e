"""Quantities several analyzers read of the same block are computed once (issue 29, ops39).

The two sink-score instances of a report (the heads section's and the language-model
heads') read the attention to each sentence's first real token: it is gathered once per
block (``PatternBlock.shared``) and handed to both, whose results stay those each gets alone.
"""

from __future__ import annotations

import pandas as pd
import pytest

from attnlens.measures.lm_heads.sinks import SinkScores
from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

N_LAYERS = 3


@pytest.fixture(scope="module")
def fed():
    """A tiny model, a word tokenizer and two batches of the sample treebank."""
    from attnlens.data.corpus import load_corpus
    from tests.pruning_toys import vocab_size, word_tokenizer

    tokenizer = word_tokenizer()
    model = tiny_model(seed=0, n_layers=N_LAYERS, vocab_size=vocab_size(), n_ctx=128,
                       n_token_types=0)
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=4)[:2]
    return model, tokenizer, batches


def _counting(monkeypatch, cls, name: str) -> list[int]:
    """Count the calls of ``cls.name`` (the computation a shared quantity runs once)."""
    calls = []
    method = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(1)
        return method(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def _tables(analyzer) -> dict[str, pd.DataFrame]:
    return analyzer.result()


def _assert_same_tables(found, want) -> None:
    assert found.keys() == want.keys()
    for name in want:
        pd.testing.assert_frame_equal(found[name], want[name], check_exact=True)


def test_sink_scores_read_the_first_token_column_once_per_block(fed, monkeypatch):
    model, _, batches = fed
    alone = SinkScores.for_model(model)
    run_analyzers(model, batches, [alone], show_progress=False)
    calls = _counting(monkeypatch, SinkScores, "_to_first")
    pair = [SinkScores.for_model(model), SinkScores.for_model(model)]
    run_analyzers(model, batches, pair, show_progress=False)
    assert len(calls) == N_LAYERS * len(batches)  # once per block, not once per instance
    for scores in pair:
        _assert_same_tables(_tables(scores), _tables(alone))
