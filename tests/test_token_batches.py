"""Batches built by a token budget (``--batch-tokens``), and the bounded samples of the
collapse variants, head paths, sparse coverage, linear view and null pass taken by corpus
index, so that no result depends on how the sentences are batched (issue 29, batch30)."""

from __future__ import annotations

import pytest
import torch

from attnlens.data.text import length_sorted_chunks
from attnlens.errors import DataError
from attnlens.stream.base import Batch
from attnlens.stream.sentence_sample import sampled_rows, spread_sample


def test_token_budget_fills_each_batch_up_to_the_budget_in_length_order():
    lengths = [3, 10, 4, 4, 9, 30, 5, 2]
    chunks = length_sorted_chunks(lengths, batch_size=3, batch_tokens=16)
    # length order 2, 3, 4, 4, 5, 9, 10, 30: [2, 3, 4] pads to 3 x 4 = 12; 4, 5 (+9 would
    # make 3 x 9 = 27); 9 alone (9, 10 would be 20); 10; 30 alone, over the budget
    assert sorted(sorted(lengths[i] for i in c) for c in chunks) == [
        [2, 3, 4], [4, 5], [9], [10], [30]]
    for chunk in chunks:
        widest = max(lengths[i] for i in chunk)
        assert len(chunk) <= 3 and (len(chunk) * widest <= 16 or len(chunk) == 1)
    assert sorted(i for c in chunks for i in c) == list(range(len(lengths)))


def test_without_a_budget_batches_are_runs_of_batch_size_as_before():
    lengths = [5, 1, 4, 2, 3]
    assert sorted(length_sorted_chunks(lengths, 2)) == [[0], [1, 3], [4, 2]]
    assert length_sorted_chunks(lengths, 2, None) == length_sorted_chunks(lengths, 2)
    with pytest.raises(DataError, match="batch tokens"):
        length_sorted_chunks(lengths, 2, 0)


def test_corpus_batches_respect_the_budget_and_keep_every_sentence(minilm):
    from attnlens.data.corpus import load_corpus

    _, tokenizer = minilm
    corpus = load_corpus()
    batches = corpus.batches(tokenizer, batch_size=64, max_length=128, batch_tokens=256)
    index = sorted(i for b in batches for i in b.extra["index"])
    assert index == list(range(len(corpus)))
    for batch in batches:
        assert batch.size == 1 or batch.attention_mask.numel() <= 256
        assert batch.extra["corpus_size"] == len(corpus)
    assert len(batches) > 1
    roomy = corpus.batches(tokenizer, batch_size=64, max_length=128, batch_tokens=4096)
    assert len(roomy) == 1  # 43 short sentences: one batch, against 3 of 16



def test_the_sample_is_the_same_sentences_for_any_batching():
    size, n = 43, 12
    wanted = {j * size // n for j in range(n)}
    for batch_size in (1, 5, 16, 43):
        picked = []
        for chunk in length_sorted_chunks(list(range(size))[::-1], batch_size):
            batch = Batch(input_ids=torch.zeros(len(chunk), 2, dtype=torch.long),
                          attention_mask=torch.ones(len(chunk), 2, dtype=torch.long),
                          extra={"index": chunk, "corpus_size": size})
            rows = sampled_rows(batch, None, n, 0)
            picked += [chunk[r] for r in (range(len(chunk)) if rows is None else rows.tolist())]
        assert sorted(picked) == sorted(wanted), batch_size
    assert spread_sample(torch.arange(5), 8, 5).all()  # fewer sentences than the sample


def _tiny_corpus_batches(sizes: list[int], lengths: list[int], seed: int = 0) -> list[Batch]:
    """The same 12 sentences (ids drawn once) cut into batches of ``sizes``, with indices."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(1, 50, (len(lengths), width), generator=gen)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, start = [], 0
    for size in sizes:
        rows = order[start:start + size]
        start += size
        longest = max(lengths[i] for i in rows)
        batches.append(Batch(input_ids=(ids * mask)[rows, :longest],
                             attention_mask=mask[rows, :longest],
                             extra={"index": rows, "corpus_size": len(lengths)}))
    return batches


@pytest.mark.parametrize("sizes", [[12], [5, 4, 3], [1] * 12])
def test_sampled_analyzers_give_the_same_results_for_any_batching(sizes):
    """Variants (6 of 12 sentences), head paths (6), sparse coverage and linear view (5), and
    the head examples (their windows within each sentence, not the batch's padded width):
    equal tables whether the 12 sentences come in one batch, three or twelve."""
    import pandas as pd

    from attnlens.measures.collapse.paths import PathCollapse
    from attnlens.measures.collapse.variant_collapse import VariantCollapse
    from attnlens.measures.heads.examples import EXAMPLE_MEASURES, HeadExamples
    from attnlens.measures.linear.linear_attention import LinearAttentionView
    from attnlens.measures.sparse.sparse import SparseCoverage
    from attnlens.stream.runner import run_analyzers
    from tests.fixtures import tiny_model

    model = tiny_model()
    lengths = [5, 7, 3, 20, 12, 9, 30, 4, 17, 6, 11, 25]

    def tables(batches):
        analyzers = [
            VariantCollapse.for_model(model, variants=["san", "full"], max_sentences=6),
            PathCollapse.for_model(model, n_paths=4, max_sentences=6),
            SparseCoverage(**SparseCoverage.model_options(model), max_sentences=5),
            LinearAttentionView(**LinearAttentionView.model_options(model), max_sentences=5),
            HeadExamples(**HeadExamples.model_options(model), cls_ids={1}, sep_ids={2},
                         punct_ids={3}, measures=EXAMPLE_MEASURES, window=4),
        ]
        run_analyzers(model, batches, analyzers, show_progress=False)
        assert [a.sentences for a in analyzers[:4]] == [6, 6, 5, 5]
        return [t for a in analyzers for t in a.result().values()]

    for got, want in zip(tables(_tiny_corpus_batches(sizes, lengths)),
                         tables(_tiny_corpus_batches([12], lengths)), strict=True):
        # float32 patterns of the same sentences padded to other widths: the real entries are
        # the same sums blocked otherwise (a few ulps), then averaged in float64; the
        # variants' float64 residuals sit near 1e-16 at worst (see test_collapse_variant_batches)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                      check_exact=False, rtol=1e-5, atol=1e-6)


def test_the_null_sample_takes_sentences_by_corpus_index():
    from attnlens.report.null_run import sample_batches

    lengths = list(range(3, 15))
    for sizes in ([12], [5, 4, 3], [2] * 6):
        batches = _tiny_corpus_batches(sizes, lengths)
        sample = sample_batches(batches, 4)
        assert sorted(i for b in sample for i in b.extra["index"]) == [0, 3, 6, 9]
    assert sample_batches(batches, 20) == batches  # the whole corpus when it is smaller


def test_a_sampled_batch_keeps_every_per_sentence_annotation(minilm):
    """The null pass feeds cut batches to every analyzer: word counts, dependency heads and
    relations must follow the sentences kept (a corpus over 512 sentences failed without)."""
    from attnlens.data.corpus import load_corpus
    from attnlens.report.null_run import sample_batches

    _, tokenizer = minilm
    batches = load_corpus().batches(tokenizer, batch_size=16, max_length=128)
    sample = sample_batches(batches, 10)
    assert sum(b.size for b in sample) == 10
    by_index = {i: (b, row) for b in batches for row, i in enumerate(b.extra["index"])}
    for cut in sample:
        for row, i in enumerate(cut.extra["index"]):
            whole, at = by_index[i]
            for name in ("n_words", "heads", "relations", "unaligned"):
                assert cut.extra[name][row] == whole.extra[name][at], name
            assert cut.words[row] == whole.words[at]
            assert torch.equal(cut.word_ids[row], whole.word_ids[at])
        assert cut.extra["corpus_size"] == len(by_index)
