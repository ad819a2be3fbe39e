"""Parity with Hugging Face, measured live on tiny random models (`attnlens models --verify`).

For each architecture a converter supports, a tiny random model is built from its Hugging Face
config class (eager attention, weights large enough that every part matters), saved with
``save_pretrained``, loaded with attnlens, and compared on a right-padded batch in float32:
every layer's attention probabilities (real query rows and keys), every layer's hidden states
(real positions) and the output head's logits. The tests use the same functions.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlens.loaders.parity_inputs import VOCAB, PaddedBatch, padded_batch, save_tiny

# Absolute tolerance of the tiny-model parity (fp32). Attention rows are <= 1, logits <= ~6,
# hidden states <= ~4 (post-norm) and <= ~25 (pre-norm residual streams of GPT-2/Llama, ulp
# 1.9e-6): other kernels and op orders than transformers' give a few ulps, measured <= 4.8e-6
# (GPT-2 hidden, 2.5 ulps) under ATEN_CPU_CAPABILITY avx512, avx2 and default with
# MKL_CBWR=AVX2/COMPATIBLE. About 2x headroom only: if a kernel set ever exceeds it, scale it
# by the magnitude of the compared values rather than raise it.
TINY_TOL = 1e-5
# Sizes of the tiny models: 2 layers, 4 heads, small widths.
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}
_LLAMA_STYLE = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, num_key_value_heads=2,
                    max_position_embeddings=64, **TINY)
# config.json fields of each family's tiny model (model_type -> keyword arguments).
TINY_CONFIGS: dict[str, dict] = {
    "bert": dict(vocab_size=VOCAB, num_labels=3, **TINY),
    "roberta": dict(vocab_size=VOCAB, pad_token_id=1, type_vocab_size=1, num_labels=3,
                    max_position_embeddings=40, **TINY),
    "distilbert": dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                       num_labels=3, max_position_embeddings=40),
    "gpt2": dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40,
                 bos_token_id=0, eos_token_id=0),
    "llama": _LLAMA_STYLE,
    "mistral": _LLAMA_STYLE,
    "qwen2": _LLAMA_STYLE,
}
PAD_IDS = {"roberta": 1}
# Architectures of the encoder-decoder families that hold one stack only.
ENCODER_ONLY = ("T5EncoderModel",)  # padding token of the family's tiny batch (default 0)


@dataclass
class Outputs:
    """Per-layer patterns ``[batch, head, query_pos, key_pos]``, hidden states, logits."""

    patterns: list[torch.Tensor]
    hidden: list[torch.Tensor]  # embeddings output, then every layer's output
    logits: torch.Tensor | None


@torch.no_grad()
def hf_outputs(hf_model, batch: PaddedBatch, head: bool = True) -> Outputs:
    out = hf_model(**batch.inputs(), output_hidden_states=True, output_attentions=True)
    logits = getattr(out, "logits", None) if head else None
    return Outputs(list(out.attentions), list(out.hidden_states), logits)


@torch.no_grad()
def attnlens_outputs(model, batch: PaddedBatch) -> Outputs:
    """attnlens' counterpart of ``hf_outputs``.

    Hugging Face reports the last hidden state after the final norm (pre-norm models).
    """
    names = ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(model.cfg.n_layers)]
    names += [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    hidden_final = model(**batch.inputs(), return_type="hidden")
    logits, cache = model.run_with_cache(**batch.inputs(), names_filter=names)
    patterns = [cache["pattern", i] for i in range(model.cfg.n_layers)]
    hidden = [cache["hook_embed"]] + [
        cache[f"blocks.{i}.hook_resid_post"] for i in range(model.cfg.n_layers)
    ]
    if model.cfg.final_norm:
        hidden[-1] = hidden_final
    has_logits = model.cfg.head in ("mlm", "lm", "classifier")
    return Outputs(patterns, hidden, logits if has_logits else None)


def max_differences(ours: Outputs, theirs: Outputs, mask: torch.Tensor) -> dict[str, float]:
    """Largest absolute differences on real tokens: attention rows, hidden states, logits."""
    from attnlens.errors import ModelLoadError

    real = mask.bool()  # [batch, pos]
    pair = real[:, None, :, None] & real[:, None, None, :]  # [batch, 1, query_pos, key_pos]
    if len(ours.patterns) != len(theirs.patterns) or len(ours.hidden) != len(theirs.hidden):
        raise ModelLoadError("attnlens and Hugging Face disagree on the number of layers.")
    att = max(
        float((a - b).abs().masked_select(pair).max())
        for a, b in zip(ours.patterns, theirs.patterns, strict=True)
    )
    hid = max(
        float((a - b).abs()[real].max()) for a, b in zip(ours.hidden, theirs.hidden, strict=True)
    )
    diffs = {"attention": att, "hidden": hid}
    if theirs.logits is not None or ours.logits is not None:
        a, b = ours.logits, theirs.logits
        if a is None or b is None or a.shape != b.shape:
            raise ModelLoadError("attnlens and Hugging Face disagree on the output head.")
        diffs["logits"] = float(((a - b).abs()[real] if a.dim() == 3 else (a - b).abs()).max())
    return diffs


def tiny_config(model_type: str, **overrides):
    """The tiny Hugging Face config of a family (``TINY_CONFIGS``), with ``overrides``."""
    from transformers import AutoConfig

    if model_type not in TINY_CONFIGS:  # the encoder-decoder families (T5EncoderModel)
        from attnlens.loaders.verify_seq2seq import TINY_SEQ2SEQ_CONFIGS

        return AutoConfig.for_model(model_type,
                                    **{**TINY_SEQ2SEQ_CONFIGS[model_type], **overrides})
    return AutoConfig.for_model(model_type, **{**TINY_CONFIGS[model_type], **overrides})


def measure_parity(model_type: str, architecture: str, folder: Path) -> dict[str, float]:
    """Build, save and load one tiny model; its largest differences to Hugging Face."""
    import transformers

    from attnlens.loaders.loading import load_model
    from attnlens.loaders.verify_seq2seq import TINY_SEQ2SEQ_CONFIGS, measure_seq2seq_parity

    if model_type in TINY_SEQ2SEQ_CONFIGS and architecture not in ENCODER_ONLY:
        return measure_seq2seq_parity(model_type, architecture, folder)
    hf = save_tiny(getattr(transformers, architecture), tiny_config(model_type), folder)
    ours = load_model(folder)
    batch = padded_batch(pad_id=PAD_IDS.get(model_type, 0))
    return max_differences(attnlens_outputs(ours, batch), hf_outputs(hf, batch),
                           batch.attention_mask)


def verify_all(
    model_types: list[str] | None = None, progress: Callable[[int], None] | None = None
) -> list[dict]:
    """One row per supported architecture: the parity measured now, and whether it holds."""
    from transformers.utils import logging as hf_logging

    from attnlens.loaders.registry import CONVERTERS

    chosen = [(t, arch) for t, conv in CONVERTERS.items() if not model_types or t in model_types
              for arch in conv.architectures]
    rows = []
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # save_pretrained's bars would bury the table
    try:
        with tempfile.TemporaryDirectory(prefix="attnlens-verify-") as tmp:
            for model_type, architecture in chosen:
                diffs = measure_parity(model_type, architecture, Path(tmp) / architecture)
                worst = max(diffs.values())
                rows.append({"model_type": model_type, "architecture": architecture, **diffs,
                             "max": worst, "within_tolerance": worst <= TINY_TOL})
                if progress is not None:
                    progress(1)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return rows
