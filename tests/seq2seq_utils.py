"""Parity helpers for encoder-decoder models (BART, Marian, T5) against HF eager attention.

The building and measuring live in ``attnlens.loaders.verify_seq2seq`` (`attnlens models
--verify` uses them too); this module adds the assertion and tiny tokenizers for the tests.
"""

from __future__ import annotations

from pathlib import Path

from attnlens.loaders.verify_seq2seq import (  # noqa: F401 (re-exported for the tests)
    SEQ2SEQ,
    Seq2SeqBatch,
    Seq2SeqOutputs,
    attnlens_seq2seq_outputs,
    hf_seq2seq_outputs,
    save_and_reload,
    seq2seq_batch,
    seq2seq_differences,
)
from tests.parity_utils import TINY_TOL, assert_parity


def check_seq2seq_parity(hf_model, model, batch: Seq2SeqBatch, label: str,
                         tol: float = TINY_TOL) -> dict[str, float]:
    diffs = seq2seq_differences(attnlens_seq2seq_outputs(model, batch),
                                hf_seq2seq_outputs(hf_model, batch), batch)
    assert_parity(diffs, tol, label)
    return diffs


SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def save_word_tokenizer(path: Path, words, bos: bool = True) -> int:
    """A word-level fast tokenizer (``<s> words </s>``, pad id 0) saved in ``path``.

    Returns the vocabulary size. Words not in ``words`` become ``<unk>``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for word in words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    template = "<s> $A </s>" if bos else "$A </s>"
    specials = [("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])]
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(path))
    return len(vocab)


def tiny_bart_with_tokenizer(path: Path, words, **overrides):
    """A tiny random BART (LM head) with a word-level tokenizer; returns the HF model."""
    from transformers import BartConfig, BartForConditionalGeneration

    vocab = save_word_tokenizer(path, words)
    config = BartConfig(vocab_size=vocab, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=2, forced_eos_token_id=2,
                        **{**SEQ2SEQ, "max_position_embeddings": 160, **overrides})
    return save_and_reload(BartForConditionalGeneration, config, path)
