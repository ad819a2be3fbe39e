"""``HFAttentionModel``: a Hugging Face model run through attnlens' attention function.

The model's own modules compute everything but the attention itself; the ``attnlens``
function registered on transformers' attention interface (``attention.py``) computes that,
firing the hook points of ``blocks.py``. Residual hooks come from forward hooks on the layer
modules (``hook_resid_pre`` = the layer's input, ``hook_resid_post`` = its output,
``hook_embed`` = the first layer's input); ``hook_attn_out`` and ``hook_result`` from the
verified output projection (``wiring.py``). Names follow attnlens' own models:
``blocks.L.attn.hook_pattern`` for a single stack, ``encoder.`` / ``decoder.`` prefixes and
``decoder.blocks.L.cross_attn.`` for encoder-decoder models. Gate rows (``head_mask [row,
head]``, ``attention_layers``) come in the order encoder or single stack, decoder
self-attention, cross-attention.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnlens.backends.hf.blocks import HookBlock
from attnlens.backends.hf.discovery import map_layers
from attnlens.backends.hf.layer_map import LayerMap
from attnlens.backends.hf.token_maps import TokenMapsRecipe, token_maps_recipe
from attnlens.backends.hf.wiring import Wiring
from attnlens.errors import ConfigError
from attnlens.hooks import HookedModule, HookPoint
from attnlens.model.config import TransformerConfig
from attnlens.model.encoder_decoder import shift_right
from attnlens.model.protocol import AttentionLayer
from attnlens.model.query_blocks import DEFAULT_BLOCKS, QueryBlocks
from attnlens.model.token_maps import TokenMaps, TokenMapsUnavailable

_HEADS_BY_SUFFIX = (
    ("ForCausalLM", "lm"), ("LMHeadModel", "lm"), ("ForConditionalGeneration", "lm"),
    ("ForMaskedLM", "mlm"), ("ForSequenceClassification", "classifier"),
)
ENCODER_PROBE, DECODER_PROBE = 7, 5  # probe lengths: different, so cross-attention shows


def head_of(architecture: str) -> str | None:
    """attnlens' name for the output head of an HF architecture class (None: hidden states)."""
    return next((head for suffix, head in _HEADS_BY_SUFFIX if architecture.endswith(suffix)),
                None)


class HookStack(nn.Module):
    """One stack's blocks and ``hook_embed`` (the input of its first block)."""

    def __init__(self, blocks: list[HookBlock], cfg: TransformerConfig) -> None:
        super().__init__()
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList(blocks)
        self.cfg = cfg

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def heads_per_layer(self) -> list[int]:
        return [block.attn.n_heads for block in self.blocks]


def text_probe(config, encoder_decoder: bool) -> Callable[[nn.Module], Any]:
    """A forward pass on a few token ids (the ids 1.. of the vocabulary), for ``map_layers``."""
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab < 2:
        raise ConfigError(f"{type(config).__name__} has no vocabulary; pass the model's own "
                          "inputs to map it.")
    ids = (torch.arange(ENCODER_PROBE) * 7919 % (vocab - 1) + 1)[None]  # [1, pos]

    def run(model: nn.Module) -> Any:
        inputs = {"input_ids": ids.to(model.device)}
        if encoder_decoder:
            inputs["decoder_input_ids"] = inputs["input_ids"][:, :DECODER_PROBE]
        return model(**inputs, **call_options(model))

    return run


def accepts(model: nn.Module, name: str) -> bool:
    parameters = inspect.signature(model.forward).parameters
    return name in parameters


def call_options(model: nn.Module) -> dict[str, Any]:
    """``use_cache=False`` where the forward takes it: no key/value cache is built."""
    return {"use_cache": False} if accepts(model, "use_cache") else {}


def _embedding_rows(hf: nn.Module) -> int:
    """Rows of the token embedding (the ids a tokenizer may give), 0 without one."""
    try:
        embedding = hf.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return 0
    return int(embedding.num_embeddings) if isinstance(embedding, nn.Embedding) else 0


def _summary(hf: nn.Module, rows: list[LayerMap], causal: bool, source: dict) -> TransformerConfig:
    """The ``TransformerConfig`` fields analyzers read, filled from the mapped layers."""
    first = rows[0]
    heads = [r.shapes.n_heads for r in rows]
    kv_heads = [r.shapes.n_kv_heads for r in rows]
    n_heads = max(heads)
    rotary = first.rotary
    pre = [r for r in rows if r.norm_status == "pre"]
    config = hf.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return TransformerConfig(
        d_model=first.d_in or 1,
        n_layers=len(rows),
        n_heads=n_heads,
        d_mlp=int(getattr(text, "intermediate_size", 0) or 0),
        vocab_size=_embedding_rows(hf) or int(getattr(text, "vocab_size", 0) or 0),
        d_head=first.shapes.d_head,
        n_kv_heads=kv_heads[0] if n_heads % kv_heads[0] == 0 else n_heads,
        heads_per_layer=heads,
        kv_heads_per_layer=[k if h % k == 0 else h for h, k in zip(heads, kv_heads, strict=True)],
        positional="rotary" if rotary.status == "standard" else "none",
        rotary_base=rotary.base,
        rotary_dim=rotary.rotary_dim or None,
        norm=pre[0].norm.kind if pre and pre[0].norm is not None else "layernorm",
        norm_position="pre" if pre else "post",
        causal=causal,
        attn_scale=first.scaling or None,
        pad_token_id=getattr(text, "pad_token_id", None),
        head=head_of(source.get("architecture", "")),
        n_labels=int(getattr(config, "num_labels", 0) or 0),
        n_ctx=_positions(text),
        source=source,
    )


def _positions(text) -> int:
    """The longest input the checkpoint declares (``max_position_embeddings``; GPT-2's
    ``n_positions`` through its attribute map); ``TransformerConfig``'s 512 when it names
    none. Learned position tables (OPT, BERT, GPT-2) take no more; RoBERTa-style models
    number positions from ``pad_token_id + 1``, so that many fewer are usable."""
    from attnlens.position_ids import position_offset

    value = getattr(text, "max_position_embeddings", None)
    if not (isinstance(value, int) and value > 0):
        return TransformerConfig.n_ctx
    offset = position_offset(getattr(text, "model_type", None),
                             getattr(text, "pad_token_id", None))
    return value - offset if value > offset else value


class HFAttentionModel(HookedModule):
    """A Hugging Face model whose attention runs through attnlens' function (module docstring).

    ``forward(input_ids, attention_mask, head_mask=None, return_type="auto", ...)`` returns
    the final hidden states ("hidden"), the output head's logits ("logits"), or for an
    encoder-decoder model the encoder's hidden states ("encoder"). Other keyword arguments
    (``pixel_values``, ``decoder_input_ids``, ...) go to the Hugging Face model unchanged.
    """

    backend = "hf"
    # Query blocks and the whole-matrix limit (stream.feeder reads it; set_query_blocks).
    query_blocks: QueryBlocks = DEFAULT_BLOCKS

    def __init__(self, hf: nn.Module, source: dict, probe: Callable[[nn.Module], Any] | None = None,
                 ) -> None:
        super().__init__()
        self.hf = hf.eval()
        self.encoder_decoder = bool(getattr(hf.config, "is_encoder_decoder", False))
        probe = probe or text_probe(hf.config, self.encoder_decoder)
        with torch.no_grad():  # the encoder runs first: its length is the first call's
            rows = map_layers(hf, lambda: probe(hf), 0 if self.encoder_decoder else None)
        self.layer_maps = rows
        self._probe = probe
        self._token_maps: TokenMapsRecipe | TokenMapsUnavailable | None = None
        self.tokenizer = None
        by_type: dict[str, list[LayerMap]] = defaultdict(list)
        for row in rows:
            by_type[row.attention].append(row)
        if self.encoder_decoder:
            missing = [t for t in ("encoder", "decoder") if not by_type[t]]
            if missing:
                raise ConfigError(f"no {missing[0]} attention was seen in this encoder-decoder "
                                  "model; attnlens cannot map it.")
            cross = by_type["cross"]
            if cross and len(cross) != len(by_type["decoder"]):
                raise ConfigError("the decoder has cross-attention in some layers only; attnlens "
                                  "cannot map it.")
            enc_cfg = _summary(hf, by_type["encoder"], False, {**source, "stack": "encoder"})
            dec_cfg = _summary(hf, by_type["decoder"], True, {**source, "stack": "decoder"})
            self.encoder = HookStack([HookBlock(r) for r in by_type["encoder"]], enc_cfg)
            crosses = cross or [None] * len(by_type["decoder"])
            self.decoder = HookStack([HookBlock(r, c) for r, c in zip(
                by_type["decoder"], crosses, strict=True)], dec_cfg)
            self.cfg = dec_cfg
            self.stacks = {"encoder": self.encoder, "decoder": self.decoder}
        else:
            self.cfg = _summary(hf, by_type["self"], any(r.causal for r in by_type["self"]),
                                source)
            self.hook_embed = HookPoint()  # [batch, pos, d_model], the first layer's input
            self.blocks = nn.ModuleList(HookBlock(r) for r in by_type["self"])
            self.stacks = {"": self}
        self.setup_hooks()
        self._wiring = Wiring(self)
        self._slots = self._wiring.slots

    def block_of(self, layer: AttentionLayer) -> HookBlock:
        """The hook block holding ``layer`` (its stack's block of that number)."""
        stack = self if not self.encoder_decoder else (
            self.encoder if layer.attention == "encoder" else self.decoder)
        return stack.blocks[layer.layer]

    def detach_backend(self) -> None:
        """Remove every hook and slot from the HF model (it runs as plain HF again)."""
        self._wiring.remove()

    # Facts ---------------------------------------------------------------------------------
    @property
    def attention_layers(self) -> list[AttentionLayer]:
        """Every attention layer in gate-row order (single stack; or encoder, decoder, cross)."""
        if not self.encoder_decoder:
            return [AttentionLayer("self", i, b.attn, f"blocks.{i}.attn.")
                    for i, b in enumerate(self.blocks)]
        rows = [AttentionLayer("encoder", i, b.attn, f"encoder.blocks.{i}.attn.")
                for i, b in enumerate(self.encoder.blocks)]
        rows += [AttentionLayer("decoder", i, b.attn, f"decoder.blocks.{i}.attn.")
                 for i, b in enumerate(self.decoder.blocks)]
        rows += [AttentionLayer("cross", i, b.cross_attn, f"decoder.blocks.{i}.cross_attn.")
                 for i, b in enumerate(self.decoder.blocks) if b.cross_attn is not None]
        return rows

    @property
    def n_layers(self) -> int:
        return len(self.attention_layers)

    @property
    def heads_per_layer(self) -> list[int]:
        return [row.attn.n_heads for row in self.attention_layers]

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(p for p in self.hf.parameters() if p.is_floating_point()).dtype

    def gate_hook_names(self) -> list[str]:
        return [row.hook_prefix + "hook_z" for row in self.attention_layers]

    def set_query_blocks(self, blocks: QueryBlocks) -> None:
        """How every attention layer splits long patterns into blocks of query rows
        (``--query-block``) and the whole-matrix limit (``--whole-matrix-limit``), as
        attnlens' own models (``attention.EagerRows``; docs/long-context.md)."""
        self.query_blocks = blocks
        for slot in self._slots:
            slot.query_blocks = blocks

    def weight_problems(self) -> dict[str, str]:
        """Part ("QK", "OV", "norm", "rotary", "blocks") -> why it cannot be given."""
        found: dict[str, list[str]] = defaultdict(list)
        reasons: dict[str, str] = {"blocks": "the hf backend runs the Hugging Face modules "
                                             "themselves (--backend native, where a converter "
                                             "exists, builds attnlens' own)"}
        found["blocks"] = []
        for row in self.attention_layers:
            for part in ("QK", "OV", "norm", "rotary"):
                reason = row.attn.problem(part)
                if reason is not None:
                    found[part].append(row.hook_prefix.rstrip("."))
                    reasons.setdefault(part, reason)
        return {part: f"{reasons[part]}" + (f" ({', '.join(layers)})" if layers else "")
                for part, layers in found.items()}

    def token_maps(self) -> TokenMaps:
        """Token embedding, unembedding and final norm gain, verified on the mapping probe
        (``backends.hf.token_maps``; read once); ``TokenMapsUnavailable`` with the reason."""
        if self._token_maps is None:
            try:
                self._token_maps = token_maps_recipe(self, self._probe)
            except TokenMapsUnavailable as error:
                self._token_maps = error
        if isinstance(self._token_maps, TokenMapsUnavailable):
            raise TokenMapsUnavailable(str(self._token_maps))
        return self._token_maps.read()

    def decoder_token_ids(self) -> tuple[int, int | None]:
        """(decoder start id, pad id) of an encoder-decoder model's config."""
        config = self.hf.config
        start = getattr(config, "decoder_start_token_id", None)
        pad = getattr(config, "pad_token_id", None)
        return (start if start is not None else (pad if pad is not None else 0)), pad

    def decoder_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forcing decoder inputs: ``input_ids`` shifted right (as the native model)."""
        start, pad = self.decoder_token_ids()
        return shift_right(input_ids, attention_mask, start, pad)

    def set_use_sdpa(self, enabled: bool) -> None:
        """Allow (True, the default) or forbid the SDPA fast path of every attention layer.

        The fast path runs ``F.scaled_dot_product_attention`` where no hook reads scores or
        patterns and the layer has no soft-capping or sinks: equal to eager attention up to
        the kernels' rounding. False: always the hooked eager computation (bitwise eager).
        """
        for slot in self._slots:
            slot.use_sdpa = enabled

    # Forward -------------------------------------------------------------------------------
    def _set_gates(self, head_mask: torch.Tensor | None) -> None:
        if head_mask is not None and len(head_mask) != len(self._slots):
            raise ConfigError(f"head_mask needs one row per attention layer ({len(self._slots)}).")
        heads = self.heads_per_layer
        for index, slot in enumerate(self._slots):
            slot.gate_value = None if head_mask is None else head_mask[index][: heads[index]]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        return_type: str = "auto",
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        **inputs: Any,
    ) -> torch.Tensor:
        """Run the HF model (class docstring); ``head_mask [row, head]`` gates each head."""
        if return_type not in ("auto", "hidden", "logits", "encoder"):
            raise ConfigError(f"return_type={return_type!r}: use auto, hidden, logits or "
                              "encoder.")
        head = self.cfg.head
        want_logits = return_type == "logits" or (return_type == "auto" and head is not None)
        target = self.hf if want_logits else self.hf.base_model
        if want_logits and head is None:
            raise ConfigError("return_type='logits' needs a model with an output head; this "
                              "checkpoint's architecture has none.")
        if input_ids is not None:
            inputs["input_ids"] = input_ids
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask
        if token_type_ids is not None and accepts(target, "token_type_ids"):
            inputs["token_type_ids"] = token_type_ids
        if self.encoder_decoder and return_type != "encoder":
            if decoder_input_ids is None:
                if input_ids is None:
                    raise ConfigError("an encoder-decoder model needs input_ids.")
                decoder_input_ids, decoder_attention_mask = self.decoder_inputs(
                    input_ids, attention_mask)
            inputs["decoder_input_ids"] = decoder_input_ids
            if decoder_attention_mask is not None:
                inputs["decoder_attention_mask"] = decoder_attention_mask
        if return_type == "encoder":
            if not self.encoder_decoder:
                raise ConfigError("return_type='encoder' needs an encoder-decoder model.")
            target = self.hf.get_encoder()
        options = call_options(target)
        if not want_logits and head is not None and target is self.hf:
            options["output_hidden_states"] = True  # a head model without a base (T5)
        self._set_gates(head_mask)
        try:
            out = target(**inputs, **options)
        finally:
            self._set_gates(None)
        if want_logits:
            return out.logits
        return _hidden(out)


def _hidden(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    hidden = getattr(out, "last_hidden_state", None)
    for states in ("decoder_hidden_states", "hidden_states"):
        if hidden is None and getattr(out, states, None):
            hidden = getattr(out, states)[-1]
    if hidden is None and isinstance(out, tuple):
        hidden = out[0]
    if hidden is None:
        raise ConfigError(f"{type(out).__name__} has no last_hidden_state; use return_type="
                          "'logits'.")
    return hidden
