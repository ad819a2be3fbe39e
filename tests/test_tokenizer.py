"""Tokenizer wrapper: special tokens of each family, word <-> token alignment, truncation.

Besides the real MiniLM tokenizer (WordPiece, [CLS]/[SEP]), tokenizers of the other
families are trained offline here with the ``tokenizers`` library: byte-level BPE with
RoBERTa's <s> ... </s>, Llama's BOS only and GPT-2's nothing.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.data.tokenizer import Tokenizer, WordBatch
from attnlens.errors import ModelLoadError

CORPUS = [
    "the cat sat on the mat",
    "attention heads are small and attention is all you need",
    "tokenizers split rare words into pieces",
] * 4


def bpe_tokenizer(template: str | None) -> Tokenizer:
    """A byte-level BPE tokenizer; ``template`` like "<s> $A </s>" (None: no special tokens)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    rust.train_from_iterator(CORPUS, trainer)
    if template is not None:
        specials = [(t, rust.token_to_id(t)) for t in ("<s>", "</s>") if t in template]
        rust.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=specials
        )
    return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>",
                                             eos_token="</s>"))


def wordpiece_tokenizer() -> Tokenizer:
    """A BERT-style WordPiece tokenizer with [CLS] ... [SEP]."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rust = RustTokenizer(models.WordPiece(unk_token="[UNK]"))
    rust.normalizer = normalizers.BertNormalizer(lowercase=True)
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    rust.train_from_iterator(CORPUS, trainer)
    rust.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", rust.token_to_id("[CLS]")), ("[SEP]", rust.token_to_id("[SEP]"))],
    )
    return Tokenizer(PreTrainedTokenizerFast(
        tokenizer_object=rust, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        unk_token="[UNK]",
    ))


@pytest.mark.parametrize(
    ("build", "layout"),
    [
        (wordpiece_tokenizer, (["[CLS]"], ["[SEP]"])),
        (lambda: bpe_tokenizer("<s> $A </s>"), (["<s>"], ["</s>"])),  # RoBERTa
        (lambda: bpe_tokenizer("<s> $A"), (["<s>"], [])),  # Llama: BOS only
        (lambda: bpe_tokenizer(None), ([], [])),  # GPT-2: none
    ],
    ids=["wordpiece-cls-sep", "bpe-s-/s", "bpe-bos", "bpe-none"],
)
def test_special_tokens_of_each_family(build, layout):
    tok = build()
    assert tok.special_layout == layout
    assert tok.pad_token_id is not None  # a pad token exists even when the family has none
    enc = tok(["the cat sat", "attention"])
    first = tok.decode_tokens(enc["input_ids"][0].tolist())
    n_real = int(enc["attention_mask"][0].sum())
    before, after = layout
    assert first[: len(before)] == before
    assert first[n_real - len(after) : n_real] == after
    mask = tok.special_mask(enc["input_ids"])
    assert int(mask[0, :n_real].sum()) == len(before) + len(after)


def test_minilm_special_tokens(minilm):
    _, tok = minilm
    assert tok.special_layout == (["[CLS]"], ["[SEP]"])
    assert tok.special_tokens["cls"] == "[CLS]" and tok.special_tokens["sep"] == "[SEP]"
    assert tok.special_tokens["pad"] == "[PAD]"


def _check_alignment(tok: Tokenizer, batch: WordBatch, sentences) -> None:
    """Every kept word's tokens decode back to the word; nothing else carries a word id."""
    for b, words in enumerate(sentences):
        spans = batch.word_tokens(b)
        assert len(spans) == batch.n_words[b]
        for w, span in enumerate(spans):
            assert span == list(range(span[0], span[0] + len(span))), "tokens are contiguous"
            text = tok.hf.convert_tokens_to_string(
                tok.decode_tokens(batch.input_ids[b, span].tolist())
            )
            assert text.strip().lower() == words[w].lower()
        n_tagged = int((batch.word_ids[b] >= 0).sum())
        assert n_tagged == sum(len(s) for s in spans)


def test_minilm_word_alignment_and_split_words(minilm):
    _, tok = minilm
    sentences = [["The", "sesquipedalian", "lecturer", "paused", "."], ["Short", "one"]]
    batch = tok.encode_words(sentences, max_length=64)
    assert batch.n_words == [5, 2] and batch.n_cut_words == [0, 0]
    assert 1 in batch.split_words(0)  # "sesquipedalian" is several WordPiece tokens
    assert batch.word_ids[0, 0] == -1  # [CLS]
    _check_alignment(tok, batch, sentences)


def test_truncation_drops_and_counts_cut_words(minilm):
    _, tok = minilm
    words = ["a", "sesquipedalian", "word", "here"]
    counts = tok.tokens_per_word([words])[0]
    assert counts[0] == 1 and counts[1] >= 3
    # [CLS] a + two pieces of the long word + [SEP]: the long word is cut inside.
    batch = tok.encode_words([words], max_length=1 + 1 + 2 + 1)
    assert batch.n_words == [1]
    assert batch.n_cut_words == [3]  # the cut word and the two words after it
    assert batch.word_ids[0].tolist() == [-1, 0, -1, -1, -1]
    # Cut exactly after the long word: it survives whole.
    batch = tok.encode_words([words], max_length=1 + 1 + counts[1] + 1)
    assert batch.n_words == [2] and batch.n_cut_words == [2]
    _check_alignment(tok, batch, [words])


@pytest.mark.parametrize("template", ["<s> $A </s>", "<s> $A", None])
def test_bpe_word_alignment(template):
    tok = bpe_tokenizer(template)
    sentences = [["the", "cat", "sesquipedalian"], ["attention", "heads"]]
    batch = tok.encode_words(sentences, max_length=64)
    assert batch.n_words == [3, 2] and batch.n_cut_words == [0, 0]
    assert 2 in batch.split_words(0)  # unseen word: many byte-level pieces
    _check_alignment(tok, batch, sentences)
    n_special = 2 if template == "<s> $A </s>" else (1 if template else 0)
    counts = tok.tokens_per_word([["the", "cat", "sesquipedalian"]])[0]
    keep = counts[0] + counts[1]  # the first two words whole, the long word cut
    cut = tok.encode_words([["the", "cat", "sesquipedalian"]], max_length=n_special + keep + 1)
    assert cut.n_words == [2] and cut.n_cut_words == [1]
    assert int((cut.word_ids[0] >= 0).sum()) == keep


def test_word_batch_is_backward_compatible():
    batch = WordBatch(torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.long),
                      torch.tensor([[-1, 0]]), [1])
    assert batch.n_cut_words == [] and batch.model_inputs().keys() == {"input_ids",
                                                                      "attention_mask"}


def test_folder_without_tokenizer_files_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=r"no tokenizer files.*load_model"):
        Tokenizer.from_pretrained(tmp_path)


def test_unk_is_no_special_token_in_any_command(minilm):
    """One definition of "special token" for `prune --order confidence|entropy` (text
    batches) and `heads`/`analyze` (word batches): [UNK] stands for a piece of the text, so
    its row and column are analysed like any word's (issue 23, item 6)."""
    from attnlens.data.text import text_batches
    from attnlens.data.words import text_word_batches
    from attnlens.measures.heads.head_stats import HeadStats
    from attnlens.stream.runner import run_analyzers

    model, tok = minilm
    line = "the 🦜 flew home over 𝔘 hills"
    (by_text,) = text_batches(tok, [line])
    (by_word,) = text_word_batches(tok, [line])
    ids = by_text.input_ids[0].tolist()
    unk = [p for p, i in enumerate(ids) if i == tok.hf.unk_token_id]
    assert len(unk) == 2 and by_word.input_ids[0].tolist() == ids
    assert by_text.special_mask.tolist() == by_word.special_mask.tolist()
    assert not by_text.special_mask[0, unk].any()
    assert by_text.special_mask[0].tolist() == [p in (0, len(ids) - 1) for p in range(len(ids))]
    tables = []
    for batch in (by_text, by_word):
        (stats,) = run_analyzers(model, [batch], [HeadStats.for_model(model, tok)],
                                 show_progress=False)
        tables.append(stats.result()["head_stats"])
    pd.testing.assert_frame_equal(tables[0], tables[1])  # same rows, same numbers
