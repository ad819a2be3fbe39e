"""Parity helpers for encoder-decoder models (BART, Marian, T5) against HF eager attention.

A tiny random model is saved with ``save_pretrained`` and read back by both Hugging Face and
attnlens; both run a right-padded source batch and a right-padded target batch of other
lengths (so cross-attention is rectangular), fp32. Compared on real tokens: every layer's
encoder self-attention, decoder self-attention (causal) and cross-attention probabilities,
every hidden state of both stacks, and the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tests.parity_utils import TINY_TOL, VOCAB, _randomise, assert_parity, padded_batch

SOURCE_LENGTHS = (9, 6, 3)
TARGET_LENGTHS = (5, 7, 2)
# Tiny sizes: 2 encoder layers, 3 decoder layers (so a stack mix-up cannot pass), 4 heads.
SEQ2SEQ = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 48,
    "max_position_embeddings": 64,
}


@dataclass
class Seq2SeqBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    decoder_input_ids: torch.Tensor
    decoder_attention_mask: torch.Tensor

    def inputs(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "decoder_input_ids": self.decoder_input_ids,
            "decoder_attention_mask": self.decoder_attention_mask,
        }


def seq2seq_batch(pad_id: int, vocab: int = VOCAB, low: int = 5,
                  target_vocab: int | None = None) -> Seq2SeqBatch:
    src = padded_batch(SOURCE_LENGTHS, pad_id=pad_id, vocab=vocab, low=low, seed=1)
    tgt = padded_batch(TARGET_LENGTHS, pad_id=pad_id, vocab=target_vocab or vocab, low=low,
                       seed=2)
    return Seq2SeqBatch(src.input_ids, src.attention_mask, tgt.input_ids, tgt.attention_mask)


def save_and_reload(model_cls, config, path: Path, skip: tuple[str, ...] = (), seed: int = 0):
    """Random weights (``skip``: fixed tables left alone), saved, reloaded by HF (eager)."""
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    fixed = {n: p.detach().clone() for n, p in model.named_parameters()
             if any(s in n for s in skip)}
    _randomise(model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in fixed:
                param.copy_(fixed[name])
    model.save_pretrained(str(path))
    return model_cls.from_pretrained(str(path), attn_implementation="eager").eval()


@dataclass
class Seq2SeqOutputs:
    """Patterns per attention type and layer, hidden states per stack, logits."""

    patterns: dict[str, list[torch.Tensor]]
    hidden: dict[str, list[torch.Tensor]]
    logits: torch.Tensor | None


@torch.no_grad()
def hf_seq2seq_outputs(hf_model, batch: Seq2SeqBatch) -> Seq2SeqOutputs:
    out = hf_model(**batch.inputs(), output_hidden_states=True, output_attentions=True,
                   use_cache=False)
    patterns = {
        "encoder": list(out.encoder_attentions),
        "decoder": list(out.decoder_attentions),
        "cross": list(out.cross_attentions),
    }
    hidden = {"encoder": list(out.encoder_hidden_states),
              "decoder": list(out.decoder_hidden_states)}
    return Seq2SeqOutputs(patterns, hidden, getattr(out, "logits", None))


@torch.no_grad()
def attnlens_seq2seq_outputs(model, batch: Seq2SeqBatch) -> Seq2SeqOutputs:
    """attnlens' counterpart; HF reports each stack's last hidden state after its final norm."""
    n = {"encoder": model.cfg.encoder.n_layers, "decoder": model.cfg.decoder.n_layers}
    prefixes = {"encoder": "encoder.blocks.{}.attn.", "decoder": "decoder.blocks.{}.attn.",
                "cross": "decoder.blocks.{}.cross_attn."}
    names = [f"{s}.hook_embed" for s in n] + [
        f"{s}.blocks.{i}.hook_resid_post" for s in n for i in range(n[s])
    ]
    names += [p.format(i) + "hook_pattern" for a, p in prefixes.items()
              for i in range(n["encoder" if a == "encoder" else "decoder"])]
    logits, cache = model.run_with_cache(**batch.inputs(), names_filter=names)
    patterns = {
        a: [cache[p.format(i) + "hook_pattern"]
            for i in range(n["encoder" if a == "encoder" else "decoder"])]
        for a, p in prefixes.items()
    }
    hidden = {
        s: [cache[f"{s}.hook_embed"]] + [cache[f"{s}.blocks.{i}.hook_resid_post"]
                                         for i in range(n[s])]
        for s in n
    }
    model.set_use_sdpa(False)  # the reference path, as HF eager (SDPA is tested elsewhere)
    try:
        encoded = model(**batch.inputs(), return_type="encoder")
        decoded = model(**batch.inputs(), return_type="hidden")
    finally:
        model.set_use_sdpa(True)
    hidden["encoder"][-1], hidden["decoder"][-1] = encoded, decoded
    return Seq2SeqOutputs(patterns, hidden, logits if model.head is not None else None)


def seq2seq_differences(ours: Seq2SeqOutputs, theirs: Seq2SeqOutputs,
                        batch: Seq2SeqBatch) -> dict[str, float]:
    """Largest absolute differences on real tokens, per attention type, stack and logits."""
    src, tgt = batch.attention_mask.bool(), batch.decoder_attention_mask.bool()
    real_keys = {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}
    diffs = {}
    for attention, (rows, cols) in real_keys.items():
        pair = rows[:, None, :, None] & cols[:, None, None, :]  # [batch, 1, query, key]
        a, b = ours.patterns[attention], theirs.patterns[attention]
        assert len(a) == len(b) and len(a) > 0, attention
        for x, y in zip(a, b, strict=True):
            assert x.shape == y.shape, (attention, x.shape, y.shape)
        diffs[f"{attention} attention"] = max(
            float((x - y).abs().masked_select(pair).max()) for x, y in zip(a, b, strict=True)
        )
    for stack, real in (("encoder", src), ("decoder", tgt)):
        a, b = ours.hidden[stack], theirs.hidden[stack]
        assert len(a) == len(b), (stack, len(a), len(b))
        diffs[f"{stack} hidden"] = max(
            float((x - y).abs()[real].max()) for x, y in zip(a, b, strict=True)
        )
    if theirs.logits is not None or ours.logits is not None:
        assert ours.logits is not None and theirs.logits is not None
        assert ours.logits.shape == theirs.logits.shape
        diffs["logits"] = float((ours.logits - theirs.logits).abs()[tgt].max())
    return diffs


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
