"""Word-level attention against a hand computation; word batches; ties; word splitting."""

from __future__ import annotations

import pytest
import torch

from attnlens.data.words import (
    is_wordlike,
    split_words,
    text_word_batches,
    treebank_batches,
    word_attention,
    word_batches,
)
from attnlens.errors import DataError

# Tokens: [CLS] a b1 b2 c [SEP]; word "b" is split into two tokens.
WORD_IDS = torch.tensor([[-1, 0, 1, 1, 2, -1]])
SPECIAL = torch.tensor([[True, False, False, False, False, True]])
PATTERN = torch.tensor(
    [
        [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # [CLS] (dropped)
        [0.1, 0.2, 0.3, 0.1, 0.2, 0.1],  # a
        [0.2, 0.1, 0.1, 0.2, 0.3, 0.1],  # b1
        [0.0, 0.4, 0.2, 0.2, 0.0, 0.2],  # b2
        [0.3, 0.0, 0.1, 0.1, 0.4, 0.1],  # c
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # [SEP] (dropped)
    ]
)[None, None]  # [batch=1, head=1, query_pos, key_pos]


def test_word_attention_matches_hand_computation():
    wa = word_attention(PATTERN, WORD_IDS, SPECIAL)
    # from a: to a 0.2, to b 0.3 + 0.1 (sum over b's tokens), to c 0.2
    # from b: mean of rows b1, b2 = [0.1, .25, .15, .2, .15, .15] -> a .25, b .35, c .15
    # from c: a 0.0, b 0.1 + 0.1, c 0.4
    expected = torch.tensor([[0.2, 0.4, 0.2], [0.25, 0.35, 0.15], [0.0, 0.2, 0.4]])
    # assert_close's fp32 defaults (rtol 1.3e-6, atol 1e-5) here and below: sums and means of
    # <= 4 fp32 probabilities of hand values, a few ulps of O(1) (measured 3.0e-8)
    torch.testing.assert_close(wa.weights[0, 0], expected)
    # special columns dropped without renormalising: reported separately
    torch.testing.assert_close(wa.to_special[0, 0], torch.tensor([0.2, 0.25, 0.4]))
    torch.testing.assert_close(wa.weights[0, 0].sum(-1) + wa.to_special[0, 0], torch.ones(3))
    assert wa.valid.tolist() == [[True, True, True]]


def test_word_attention_batches_sentences_of_different_lengths():
    short_ids = torch.tensor([[-1, 0, 1, -1, -1, -1]])
    short_pattern = torch.zeros(1, 1, 6, 6)
    short_pattern[0, 0, :, :4] = torch.tensor([0.1, 0.6, 0.2, 0.1])  # padding gets nothing
    pattern = torch.cat([PATTERN, short_pattern])
    wa = word_attention(pattern, torch.cat([WORD_IDS, short_ids]))
    assert wa.weights.shape == (2, 1, 3, 3)
    assert wa.valid.tolist() == [[True, True, True], [True, True, False]]
    # single fp32 values carried over: exact (assert_close's fp32 defaults)
    torch.testing.assert_close(wa.weights[1, 0, :2, :2], torch.tensor([[0.6, 0.2], [0.6, 0.2]]))
    assert float(wa.weights[1, 0, :, 2].abs().sum()) == 0.0
    assert float(wa.to_special.abs().sum()) == 0.0  # no special mask given


def test_split_words_and_wordlike():
    assert split_words("Don't stop, Anna's 3 cats!") == [
        "Don't", "stop", ",", "Anna's", "3", "cats", "!"
    ]
    assert [is_wordlike(w) for w in ["cat", "3", ",", "--", "e-mail", "'s"]] == [
        True, True, False, False, True, True
    ]


def test_word_batches_exclude_words_cut_by_truncation(minilm):
    _, tokenizer = minilm
    sentences = [["hello", "freewheeling", "world"], ["a", "cat"]]
    assert tokenizer.tokens_per_word(sentences) == [[1, 3, 1], [1, 1]]
    (batch,) = word_batches(tokenizer, sentences, batch_size=2, max_length=4)
    by_index = dict(zip(batch.extra["index"], range(2), strict=True))
    first, second = by_index[0], by_index[1]
    # [CLS] hello free [SEP]: "freewheeling" lost two of its three tokens -> excluded
    assert batch.word_ids[first].tolist() == [-1, 0, -1, -1]
    assert batch.extra["n_words"][first] == 1
    assert batch.word_ids[second].tolist() == [-1, 0, 1, -1]
    assert batch.extra["n_words"][second] == 2
    assert batch.special_mask[first].tolist() == [True, False, False, True]
    assert batch.words[first] == sentences[0]


def test_treebank_and_text_batches_carry_annotations(minilm):
    from attnlens.data.conllu import sample_treebank

    _, tokenizer = minilm
    sentences = sample_treebank()[:5]
    batches = treebank_batches(tokenizer, sentences, batch_size=2)
    assert sum(len(b.words) for b in batches) == 5
    for batch in batches:
        for b, i in enumerate(batch.extra["index"]):
            assert batch.extra["heads"][b] == sentences[i].heads
            assert batch.extra["relations"][b] == sentences[i].relations
            assert batch.extra["n_words"][b] == len(sentences[i])
            assert int(batch.word_ids[b].max()) == len(sentences[i]) - 1
    (text_batch,) = text_word_batches(tokenizer, ["The cat sat.", "Hi!"], batch_size=4)
    assert sorted(map(tuple, text_batch.words)) == [("Hi", "!"), ("The", "cat", "sat", ".")]
    with pytest.raises(DataError, match="no words"):
        text_word_batches(tokenizer, ["", "   "])
    with pytest.raises(DataError, match="max length"):
        word_batches(tokenizer, [["a"]], max_length=2)


def test_load_corpus_selects_treebank_text_or_the_sample(tmp_path):
    from attnlens.data.corpus import load_corpus

    sample = load_corpus()
    assert sample.name.startswith("built-in sample treebank") and len(sample.sentences) >= 40
    text = tmp_path / "t.txt"
    text.write_text("One line.\n\nAnother line.\n", encoding="utf-8")
    plain = load_corpus(text=str(text))
    assert plain.texts == ["One line.", "Another line."] and plain.sentences is None
    treebank = tmp_path / "t.conllu"
    treebank.write_text("1\tHi\t_\tX\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    assert load_corpus(treebank=str(treebank)).sentences[0].words == ("Hi",)
    with pytest.raises(DataError, match="not both"):
        load_corpus(text=str(text), treebank=str(treebank))
    with pytest.raises(DataError, match="--parse"):
        load_corpus(parse=True)


def test_corpus_batches_in_one_call(minilm):
    from attnlens.data.corpus import corpus_batches

    _, tokenizer = minilm
    batches, name = corpus_batches(tokenizer, batch_size=50)
    assert name.startswith("built-in sample treebank")
    assert sum(len(b.words) for b in batches) == 43
    assert all("heads" in b.extra for b in batches)
