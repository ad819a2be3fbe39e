"""One attention type of an encoder-decoder model, presented as a single stack to analyzers.

Analyzers read ``model.n_layers``, ``model.heads_per_layer``, ``model.blocks[i].attn``,
``model.cfg`` and hook names ``blocks.L.attn.hook_pattern``. An ``AttentionView`` offers
exactly that for one of the three attention types and translates the names:

========== ==================================== =========================================
attention  view name                            model's hook
========== ==================================== =========================================
encoder    ``blocks.L.<x>``                     ``encoder.blocks.L.<x>``
decoder    ``blocks.L.<x>``                     ``decoder.blocks.L.<x>`` (causal)
cross      ``blocks.L.attn.<x>``                ``decoder.blocks.L.cross_attn.<x>``
cross      ``blocks.L.hook_resid_pre``          ``decoder.blocks.L.hook_resid_mid``
cross      ``blocks.L.hook_attn_out``           ``decoder.blocks.L.hook_cross_attn_out``
cross      ``blocks.L.hook_resid_mid``          ``decoder.blocks.L.hook_resid_mid_cross``
========== ==================================== =========================================

On a corpus of single sentences the decoder reads the sentence itself, teacher-forced
(``shift_right``: position ``p`` holds token ``p - 1`` and predicts token ``p``), so every
attention matrix is ``n x n`` per sentence. ``view.batch(batch)`` describes the tokens an
analyzer sees: the source batch for the encoder; the shifted batch for decoder
self-attention (queries and keys are the decoder's input tokens); for cross-attention the
source batch, so query row ``p`` stands for the decoder step that predicts source token
``p`` and keys are source tokens (offset 0 = attending to the token being produced).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import torch
from torch import nn

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import HookPoint
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.encoder_decoder import ATTENTION_TYPES
from attnlens.model.protocol import AttentionLayer, AttentionModel

_CROSS_BLOCK_HOOKS = {
    "hook_resid_pre": "hook_resid_mid",
    "hook_attn_out": "hook_cross_attn_out",
    "hook_resid_mid": "hook_resid_mid_cross",
}
_NAME_RE = re.compile(r"^blocks\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class ViewBlock:
    """What analyzers read from ``model.blocks[i]``: the attention and the norm before it
    (read when asked: an hf-backed block raises there when its norm is not reproducible)."""

    block: nn.Module
    cross: bool = False

    @property
    def attn(self) -> MultiHeadAttention:
        return self.block.cross_attn if self.cross else self.block.attn

    @property
    def ln1(self) -> nn.Module:
        return self.block.ln_cross if self.cross else self.block.ln1


def shift_batch(batch: Batch, start_id: int, pad_id: int | None) -> Batch:
    """The decoder's view of a source batch read teacher-forced (shifted right by one).

    Token ids, special-token mask and word ids move one position right within each sentence
    (the mask stays: ``shift_right``); position 0 is the decoder start token (special, no
    word). A word whose last token falls off the end is dropped (its tokens get word id -1
    and ``n_words`` shrinks), as truncation does.
    """
    from attnlens.model.encoder_decoder import shift_right

    ids, mask = shift_right(batch.input_ids, batch.attention_mask, start_id, pad_id)
    special = None
    if batch.special_mask is not None:
        special = torch.ones_like(batch.special_mask)
        special[:, 1:] = batch.special_mask[:, :-1]
        special = torch.where(mask.bool(), special, batch.special_mask)  # padding as it was
    word_ids, extra = None, dict(batch.extra)
    if batch.word_ids is not None:
        word_ids = torch.full_like(batch.word_ids, -1)  # [batch, pos]
        word_ids[:, 1:] = batch.word_ids[:, :-1]
        word_ids = word_ids.masked_fill(mask == 0, -1)
        n_words = list(extra.get("n_words", []))
        last = batch.attention_mask.sum(1) - 1  # [batch]: the position that falls off
        for b in range(word_ids.shape[0]):
            dropped = int(batch.word_ids[b, last[b]])
            if dropped >= 0:  # a word lost a token: drop it and every later word
                word_ids[b][word_ids[b] >= dropped] = -1
                if n_words:
                    n_words[b] = min(n_words[b], dropped)
        if n_words:
            extra["n_words"] = n_words
    return Batch(input_ids=ids, attention_mask=mask, token_type_ids=None, word_ids=word_ids,
                 words=batch.words, special_mask=special, extra=extra)


class AttentionView:
    """One attention type of an encoder-decoder model as a stack (module docstring).

    The model (``EncoderDecoderTransformer`` or an hf-backed encoder-decoder) has ``encoder``
    and ``decoder`` stacks whose ``blocks`` hold ``attn``, ``ln1`` (and in the decoder
    ``cross_attn``, ``ln_cross``), and ``decoder_token_ids()``.
    """

    def __init__(self, model: AttentionModel, attention: str) -> None:
        if attention not in ATTENTION_TYPES:
            raise ConfigError(f"unknown attention type {attention!r}; choose one of "
                              f"{', '.join(ATTENTION_TYPES)}.")
        self.model, self.attention = model, attention
        stack = model.encoder if attention == "encoder" else model.decoder
        self.stack = stack
        source = {**model.cfg.source, "attention": attention}
        self.cfg = dataclasses.replace(
            stack.cfg, causal=attention == "decoder", cross_attention=False, source=source
        )
        self.blocks = [ViewBlock(b, cross=attention == "cross") for b in stack.blocks]

    def __repr__(self) -> str:
        return f"AttentionView({self.attention}, {self.n_layers} layers)"

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def backend(self) -> str:
        return self.model.backend

    @property
    def attention_layers(self) -> list[AttentionLayer]:
        """The view's layers as a single stack's gate rows (``AttentionModel``)."""
        return [AttentionLayer("self", i, b.attn, f"blocks.{i}.attn.")
                for i, b in enumerate(self.blocks)]

    def weight_problems(self) -> dict[str, str]:
        """What the model cannot give (``AttentionModel``), for any of its attention types."""
        return self.model.weight_problems()

    @property
    def heads_per_layer(self) -> list[int]:
        return [block.attn.n_heads for block in self.blocks]

    @property
    def device(self) -> torch.device:
        return self.model.device

    def named_parameters(self):
        """The whole model's parameters (what ``model_fingerprint`` hashes, with ``cfg``)."""
        return self.model.named_parameters()

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def real_name(self, name: str) -> str:
        """The model's hook name for a view name such as ``blocks.3.attn.hook_pattern``."""
        match = _NAME_RE.match(name)
        if match is None:
            raise ConfigError(f"{name!r} is not a per-layer hook name (blocks.L....); an "
                              f"{self.attention} view has only per-layer hooks.")
        layer, rest = match.groups()
        if self.attention == "encoder":
            return f"encoder.{name}"
        if self.attention == "decoder":
            return f"decoder.{name}"
        if rest.startswith("attn."):
            return f"decoder.blocks.{layer}.cross_attn.{rest[len('attn.'):]}"
        if rest in _CROSS_BLOCK_HOOKS:
            return f"decoder.blocks.{layer}.{_CROSS_BLOCK_HOOKS[rest]}"
        raise ConfigError(f"{name!r} has no cross-attention counterpart.")

    @property
    def hook_dict(self) -> dict[str, HookPoint]:
        """View names -> the model's hook points (attention and residual hooks per layer)."""
        names = {}
        for layer in range(self.n_layers):
            for kind in ("q", "k", "v", "scores", "pattern", "z", "result"):
                names[f"blocks.{layer}.attn.hook_{kind}"] = None
            for block_hook in _CROSS_BLOCK_HOOKS:
                names[f"blocks.{layer}.{block_hook}"] = None
        return {name: self.model.hook_dict[self.real_name(name)] for name in names}

    def _runnable_stack(self) -> nn.Module:
        if self.attention != "encoder":
            raise ConfigError(f"the {self.attention} attention cannot run on its own (it reads "
                              "the encoder's output); only the encoder view can.")
        return self.stack

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The encoder stack's weights (what code rebuilding a stack from ``cfg`` needs)."""
        return self._runnable_stack().state_dict()

    def parameters(self):
        return self._runnable_stack().parameters()

    def batch(self, batch: Batch) -> Batch:
        """What the analyzers of this view see of a source batch (module docstring)."""
        if self.attention != "decoder":
            return batch
        start, pad = self.model.decoder_token_ids()
        return shift_batch(batch, start, pad)


def attention_views(model: AttentionModel) -> dict[str, AttentionView]:
    """The three views of a model, in ``ATTENTION_TYPES`` order."""
    return {attention: AttentionView(model, attention) for attention in ATTENTION_TYPES}
