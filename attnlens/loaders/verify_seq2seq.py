"""Parity of the encoder-decoder families (BART, Marian, T5) with Hugging Face, measured live.

``verify.measure_parity`` hands these families here. A tiny random model (2 encoder layers,
3 decoder layers, so a stack mix-up cannot pass) is saved with ``save_pretrained`` and read
back by both Hugging Face (eager) and attnlens; both run a right-padded source batch and a
right-padded target batch of other lengths (so cross-attention is rectangular), fp32.
Compared on real tokens: every layer's encoder self-attention, decoder self-attention
(causal) and cross-attention probabilities, every hidden state of both stacks, and the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from attnlens.errors import ModelLoadError
from attnlens.loaders.parity_inputs import VOCAB, padded_batch, randomise

SOURCE_LENGTHS = (9, 6, 3)
TARGET_LENGTHS = (5, 7, 2)
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
# config.json fields of each family's tiny model. T5: d_kv * heads (64) != d_model (32); few
# buckets and a short maximum distance, so the logarithmic buckets and the last shared bucket
# occur within the batch's lengths.
TINY_SEQ2SEQ_CONFIGS: dict[str, dict] = {
    "bart": dict(vocab_size=VOCAB, **SEQ2SEQ),
    "marian": dict(vocab_size=VOCAB, pad_token_id=0, decoder_start_token_id=0, eos_token_id=1,
                   forced_eos_token_id=1, scale_embedding=True, activation_function="swish",
                   **SEQ2SEQ),
    "t5": dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
               num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=8,
               relative_attention_max_distance=6, decoder_start_token_id=0,
               feed_forward_proj="gated-gelu"),
}
# Fixed tables rebuilt on load (left as they are, not randomised).
FIXED = {"marian": ("embed_positions",)}


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
    randomise(model)
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
        if len(a) != len(b) or not a or [x.shape for x in a] != [y.shape for y in b]:
            raise ModelLoadError(f"attnlens and Hugging Face disagree on the {attention} "
                                 "attention's layers or shapes.")
        diffs[f"{attention} attention"] = max(
            float((x - y).abs().masked_select(pair).max()) for x, y in zip(a, b, strict=True)
        )
    for stack, real in (("encoder", src), ("decoder", tgt)):
        a, b = ours.hidden[stack], theirs.hidden[stack]
        if len(a) != len(b):
            raise ModelLoadError(f"attnlens and Hugging Face disagree on the {stack} depth.")
        diffs[f"{stack} hidden"] = max(
            float((x - y).abs()[real].max()) for x, y in zip(a, b, strict=True)
        )
    if theirs.logits is not None or ours.logits is not None:
        if ours.logits is None or theirs.logits is None or (
                ours.logits.shape != theirs.logits.shape):
            raise ModelLoadError("attnlens and Hugging Face disagree on the output head.")
        diffs["logits"] = float((ours.logits - theirs.logits).abs()[tgt].max())
    return diffs


def measure_seq2seq_parity(model_type: str, architecture: str, folder: Path) -> dict[str, float]:
    """Build, save and load one tiny encoder-decoder model; its largest differences to HF,
    as ``verify``'s columns (attention: over the three types; hidden: over both stacks)."""
    import transformers
    from transformers import AutoConfig

    from attnlens.loaders.loading import load_model

    config = AutoConfig.for_model(model_type, **TINY_SEQ2SEQ_CONFIGS[model_type])
    hf = save_and_reload(getattr(transformers, architecture), config, folder,
                         skip=FIXED.get(model_type, ()))
    ours = load_model(folder)
    batch = seq2seq_batch(config.pad_token_id)
    diffs = seq2seq_differences(attnlens_seq2seq_outputs(ours, batch),
                                hf_seq2seq_outputs(hf, batch), batch)
    columns = {
        "attention": max(v for k, v in diffs.items() if k.endswith("attention")),
        "hidden": max(v for k, v in diffs.items() if k.endswith("hidden")),
    }
    if "logits" in diffs:
        columns["logits"] = diffs["logits"]
    return columns
