"""fixed42 (issue 29, fixed costs): the corpus's batches from one encoding of its texts.

``word_batches`` aligns each text's untruncated tokens to its words once and takes each
truncated row's word ids as their prefix (``Tokenizer.encode_text_words(full_word_ids=)``),
its token ids too, wrapped and padded by ``Tokenizer.single_template``; before, every chunk
was encoded again and aligned again by its own offsets. Every batch's tensors and word lists
must equal the offsets path's, for each tokenizer family, with and without truncation, with
and without the template, on the sample treebank and UD EWT dev.
"""

from __future__ import annotations

import pytest

from attnlens.data import conllu
from attnlens.data.text import length_sorted_chunks
from attnlens.data.words import treebank_batches
from tests.conftest import shared_file
from tests.test_tokenizer import bpe_tokenizer, wordpiece_tokenizer

TRICKY = "# text = the <s> cat [SEP] sat </s> on the mat\n" + "\n".join(
    f"{i}\t{w}\t_\tX\t_\t_\t{0 if i == 3 else 3}\tdep\t_\t_" for i, w in enumerate(
        ["the", "<s>", "cat", "[SEP]", "sat", "</s>", "on", "the", "mat"], start=1)) + "\n"


def _offsets_path(tok, sentences, max_length):
    """The batches' encodings as ``word_batches`` made them before fixed42: each chunk's
    truncated encoding aligned by its own offsets."""
    surfaces = [s.surface() for s in sentences]
    texts, spans = [t for t, _ in surfaces], [list(sp) for _, sp in surfaces]
    counts = tok.tokens_per_text_word(texts, spans)
    return [tok.encode_text_words([texts[i] for i in chunk], [spans[i] for i in chunk],
                                  max_length=max_length, full_counts=[counts[i] for i in chunk])
            for chunk in length_sorted_chunks([sum(c) for c in counts], 16, None)]


def _check_same(tok, sentences, max_length, template=True):
    assert (tok.single_template is not None) == template
    batches = treebank_batches(tok, sentences, 16, max_length)
    old = _offsets_path(tok, sentences, max_length)
    assert len(batches) == len(old)
    for batch, enc in zip(batches, old, strict=True):
        assert batch.input_ids.equal(enc.input_ids)
        assert batch.attention_mask.equal(enc.attention_mask)
        assert (batch.token_type_ids is None) == (enc.token_type_ids is None)
        assert batch.token_type_ids is None or batch.token_type_ids.equal(enc.token_type_ids)
        assert batch.word_ids.dtype == enc.word_ids.dtype and batch.word_ids.equal(enc.word_ids)
        assert batch.extra["n_words"] == enc.n_words
        assert batch.extra["unaligned"] == enc.unaligned


TOKENIZERS = {
    "wordpiece-cls-sep": wordpiece_tokenizer,
    "bpe-s-/s": lambda: bpe_tokenizer("<s> $A </s>"),
    "bpe-bos": lambda: bpe_tokenizer("<s> $A"),
    "bpe-none": lambda: bpe_tokenizer(None),
}


@pytest.mark.parametrize("max_length", [5, 9, 128])
@pytest.mark.parametrize("family", list(TOKENIZERS))
def test_batches_as_before_each_family(family, max_length):
    sentences = conllu.sample_treebank() + conllu.parse_conllu(TRICKY)
    _check_same(TOKENIZERS[family](), sentences, max_length)


@pytest.mark.parametrize("max_length", [6, 128])
def test_batches_as_before_minilm_sample(minilm, max_length):
    _, tok = minilm
    _check_same(tok, conllu.sample_treebank() + conllu.parse_conllu(TRICKY), max_length)


@pytest.mark.parametrize("max_length", [24, 128])
def test_batches_as_before_on_ud_ewt_dev(minilm, max_length):
    _, tok = minilm
    _check_same(tok, conllu.read_conllu(shared_file("ud-ewt/en_ewt-ud-dev.conllu")),
                max_length)


@pytest.mark.parametrize("max_length", [4, 6, 128])
def test_batches_as_before_without_template(minilm, max_length):
    """A tokenizer whose probes do not show its template: the chunks are encoded."""
    from attnlens.data.tokenizer import Tokenizer

    tok = Tokenizer(minilm[1].hf)
    tok.__dict__["single_template"] = None
    _check_same(tok, conllu.sample_treebank() + conllu.parse_conllu(TRICKY), max_length,
                template=False)


def test_template_refused_when_it_truncates_otherwise(minilm, monkeypatch):
    """The probes check the template's truncation too: one that cuts a token more is None."""
    from attnlens.data.tokenizer import SingleTemplate, Tokenizer

    encode = SingleTemplate.encode
    monkeypatch.setattr(SingleTemplate, "encode",
                        lambda self, tokens, max_length: encode(self, tokens, max_length - 1))
    assert Tokenizer(minilm[1].hf).single_template is None


def test_a_slow_tokenizer_is_refused_as_before(minilm):
    """Word batches need offsets: a slow tokenizer is the same one-line error as before."""
    from transformers import BertTokenizerLegacy  # transformers 5's slow (Python) tokenizer

    from attnlens.data.tokenizer import Tokenizer
    from attnlens.errors import DataError

    slow = Tokenizer(BertTokenizerLegacy.from_pretrained(minilm[1].hf.name_or_path,
                                                         local_files_only=True))
    with pytest.raises(DataError, match="needs a fast"):
        treebank_batches(slow, conllu.sample_treebank())
