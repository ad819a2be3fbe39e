"""The spectrum's bounded sample: N sentences evenly spaced by corpus index."""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.spectrum.section import REPORT_SENTENCES, SpectrumSection
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer, spread_sample
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers
from tests.fixtures import tiny_model

LENGTHS = [5, 7, 7, 3, 12, 9, 9, 4, 20, 6, 11]


def sentences(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 50, (n,), generator=gen) for n in LENGTHS]


def batches_of(order: list[list[int]], tokens: list[torch.Tensor],
               sized: bool = False) -> list[Batch]:
    """Batches holding the sentences of the given corpus indices, padded, with their index
    (and, ``sized``, the corpus size, as ``Corpus.batches`` gives them)."""
    out = []
    for indices in order:
        width = max(len(tokens[i]) for i in indices)
        ids = torch.zeros(len(indices), width, dtype=torch.long)
        mask = torch.zeros(len(indices), width, dtype=torch.long)
        for row, i in enumerate(indices):
            ids[row, : len(tokens[i])], mask[row, : len(tokens[i])] = tokens[i], 1
        extra = {"index": list(indices)}
        if sized:
            extra["corpus_size"] = len(tokens)
        out.append(Batch(input_ids=ids, attention_mask=mask, extra=extra))
    return out


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def state(analyzer: SpectrumAnalyzer) -> dict:
    return analyzer.state_dict()["state"]


def assert_sums_close(a: dict, b: dict, fields=("curve_sum", "summary_sum")) -> None:
    for field in fields:
        # other batches pad the sentences to other widths, which changes the float32
        # rounding of their patterns only: sums of <= 11 sentences' measures of size <= 20,
        # each off by O(20 x 1.19e-7) relative -> 1e-5, as test_spectrum's streaming test
        # (measured 5.4e-8)
        torch.testing.assert_close(a[field], b[field], rtol=0, atol=1e-5)


def test_sample_reads_exactly_the_first_sentences_whatever_the_batching(model):
    tokens = sentences()
    n = 4
    shuffled = [[9, 2, 0], [5, 10], [3, 7, 1, 8], [6, 4]]  # indices 0..3 spread over batches
    bounded = SpectrumAnalyzer.for_model(model, max_sentences=n)
    run_analyzers(model, batches_of(shuffled, tokens), [bounded], show_progress=False)
    # the same sentences alone, in other batches, without a bound
    alone = SpectrumAnalyzer.for_model(model)
    run_analyzers(model, batches_of([[3], [1, 0, 2]], tokens), [alone], show_progress=False)
    assert bounded.sentences == alone.sentences == n
    assert bounded.unsampled == len(LENGTHS) - n
    assert bounded.token_sum == sum(LENGTHS[:n])
    assert bounded.bucket_count == alone.bucket_count
    assert_sums_close(state(bounded), state(alone))
    # a bound above the corpus reads every sentence: the unbounded analyzer's state
    everything = SpectrumAnalyzer.for_model(model, max_sentences=100)
    unbounded = SpectrumAnalyzer.for_model(model)
    for analyzer in (everything, unbounded):
        run_analyzers(model, batches_of(shuffled, tokens), [analyzer], show_progress=False)
    assert everything.unsampled == 0
    for field in ("curve_sum", "summary_sum"):
        assert torch.equal(state(everything)[field], state(unbounded)[field])


@pytest.mark.parametrize(("size", "n"), [(2001, 256), (11, 4), (10, 3), (7, 6), (100, 1),
                                         (5, 5), (5, 9)])
def test_spread_sample_is_every_floor_of_j_size_over_n(size, n):
    index = torch.arange(size)
    picked = index[spread_sample(index, n, size)].tolist()
    assert picked == (sorted({j * size // n for j in range(n)}) if n < size else list(range(size)))
    assert index[spread_sample(index, n, None)].tolist() == list(range(min(n, size)))


def test_with_a_corpus_size_the_sample_spreads_over_the_corpus(model):
    tokens = sentences()
    shuffled = [[9, 2, 0], [5, 10], [3, 7, 1, 8], [6, 4]]
    spread = SpectrumAnalyzer.for_model(model, max_sentences=4)  # indices 0, 2, 5, 8 of 11
    run_analyzers(model, batches_of(shuffled, tokens, sized=True), [spread],
                  show_progress=False)
    alone = SpectrumAnalyzer.for_model(model)
    run_analyzers(model, batches_of([[8, 0], [5, 2]], tokens), [alone], show_progress=False)
    assert spread.sentences == 4 and spread.unsampled == len(LENGTHS) - 4
    assert spread.token_sum == sum(LENGTHS[i] for i in (0, 2, 5, 8))
    assert_sums_close(state(spread), state(alone))


def test_split_runs_merge_into_the_one_run_sample(model):
    """Two processes' shares (torchrun) hold the same sample as one process."""
    tokens = sentences(1)
    order = [[9, 2, 0], [5, 10], [3, 7, 1, 8], [6, 4]]
    one = SpectrumAnalyzer.for_model(model, max_sentences=5)
    run_analyzers(model, batches_of(order, tokens, sized=True), [one], show_progress=False)
    first = SpectrumAnalyzer.for_model(model, max_sentences=5)
    second = SpectrumAnalyzer.for_model(model, max_sentences=5)
    run_analyzers(model, batches_of(order, tokens, sized=True)[::2], [first],
                  show_progress=False)
    run_analyzers(model, batches_of(order, tokens, sized=True)[1::2], [second],
                  show_progress=False)
    merged = first.merge(second)
    assert merged.sentences == one.sentences == 5
    assert merged.unsampled == one.unsampled == len(LENGTHS) - 5
    assert_sums_close(state(merged), state(one))


class Untouchable:
    """A pattern block an analyzer must not read (any attribute raises)."""

    def __getattr__(self, name):
        raise AssertionError(f"the spectrum read {name} of a batch outside its sample")


def test_batches_outside_the_sample_are_not_read(model):
    tokens = sentences()
    (batch,) = batches_of([[7, 8, 9]], tokens)
    analyzer = SpectrumAnalyzer.for_model(model, max_sentences=3)
    assert analyzer.whole_matrix_length(batch) == 0  # needs no whole matrix either
    analyzer.begin_batch(batch)
    for layer in range(model.n_layers):
        analyzer.update_block(batch, layer, Untouchable(), {})
        analyzer.end_layer(batch, layer)
    analyzer.end_batch(batch)
    assert analyzer.sentences == 0 and analyzer.unsampled == 3
    assert not analyzer.bucket_count


def test_whole_matrix_length_counts_the_sample_only(model):
    tokens = sentences()
    (batch,) = batches_of([[8, 1, 4]], tokens)  # lengths 20, 7, 12
    assert SpectrumAnalyzer.for_model(model, max_sentences=5).whole_matrix_length(batch) == 12
    assert SpectrumAnalyzer.for_model(model).whole_matrix_length(batch) == 20


def test_without_corpus_indices_the_first_sentences_seen_are_the_sample(model):
    tokens = sentences()
    batches = batches_of([[0, 1, 2], [3, 4]], tokens)
    for b in batches:
        b.extra.pop("index")
    bounded = SpectrumAnalyzer.for_model(model, max_sentences=4)
    run_analyzers(model, batches, [bounded], show_progress=False)
    assert bounded.sentences == 4 and bounded.unsampled == 1
    assert bounded.token_sum == sum(LENGTHS[:4])


def test_bound_must_be_positive(model):
    with pytest.raises(ConfigError, match="at least 1"):
        SpectrumAnalyzer.for_model(model, max_sentences=0)


def test_report_section_reads_the_bounded_sample_and_says_so(model):
    section = SpectrumSection.for_report()
    assert section.max_sentences == REPORT_SENTENCES
    (analyzer,) = section.analyzers(model, None)
    assert analyzer.max_sentences == REPORT_SENTENCES
    assert SpectrumSection().max_sentences is None  # `attnlens spectrum`: every sentence
    from attnlens.measures.spectrum.section import SPECTRUM, spectrum_summary_text

    captions = {t.name: t.caption for t in SPECTRUM.tables}
    assert "--spectrum-sentences" in captions["spectrum_summary"]
    tokens = sentences()
    bounded = SpectrumAnalyzer.for_model(model, max_sentences=3)
    run_analyzers(model, batches_of([[0, 1, 2, 3, 4]], tokens), [bounded],
                  show_progress=False)
    text = spectrum_summary_text(bounded.result(), bounded.sentences, bounded.mean_length,
                                 bounded.unsampled)
    assert text.startswith("3 sentences (of the corpus's 5, evenly spaced by corpus index: "
                           "--spectrum-sentences)")


def test_corpus_batches_carry_the_corpus_size(minilm):
    from attnlens.data.corpus import load_corpus
    from attnlens.data.text import sample_sentences, text_batches

    _, tokenizer = minilm
    texts = text_batches(tokenizer, sample_sentences()[:10], batch_size=4, max_length=64)
    words = load_corpus().batches(tokenizer, 16, 64)  # the embedded sample treebank
    assert {b.extra["corpus_size"] for b in texts} == {10}
    assert {b.extra["corpus_size"] for b in words} == {sum(b.size for b in words)} == {43}


def test_cli_default_is_the_report_default():
    from attnlens.cli.analyze import SpectrumSentencesOpt

    assert SpectrumSentencesOpt.default == REPORT_SENTENCES


def test_cli_option_reaches_the_section(tmp_path, monkeypatch):
    """--spectrum-sentences sets the spectrum section the command runs (0: every sentence)."""
    from attnlens.cli import analyze as command

    seen = {}

    class Run:
        def write_report(self, sections, **kwargs):
            seen.update({s.name: s for s in sections})

    for value, expected in ((7, 7), (0, None)):
        command.analyze(Run(), spectrum_sentences=value, **defaults(command.analyze))
        assert seen["spectrum"].max_sentences == expected


def defaults(function) -> dict:
    """Every other parameter of a command at its default (Typer's options hold theirs)."""
    import inspect

    parameters = inspect.signature(function).parameters
    return {name: getattr(p.default, "default", p.default) for name, p in parameters.items()
            if name not in ("run", "spectrum_sentences")}
