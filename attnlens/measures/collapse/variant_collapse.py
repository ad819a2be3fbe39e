"""Rank collapse of a pretrained model's block variants (Dong et al. 2021), on a corpus.

A variant (``variants.VARIANTS``) runs the model's own blocks with parts switched off: the
skip connections, the MLPs, the norms. ``variant_depths`` runs it on the loaded weights: no
model is rebuilt or copied (in float64 the weights are cast once per batch and shared by all
variants, through ``torch.func.functional_call``). ``VariantCollapse`` folds the relative
residual at every depth, per variant; its state holds plain tensors only. It gets the model
as an argument of ``model_pass`` and holds the sampled sentences of a few batches (at most
``FLUSH_SENTENCES``, or until its sample is complete), then runs every variant over them in
one call, each sentence alone at its own length (``sentence_inputs``) and on one thread: a
sentence's residuals are then the same bits for any batching, any number of torchrun
processes and any thread count, which rows run beside it changing nothing. The state
(``state_dict``, ``result``, ``merge``) runs what is still held first. Reading nothing of
the corpus pass, it runs in a forked process beside the pass where `analyze` can
(``runs_beside``, ``report.own_passes_beside``).

The held sentences run in one ``functional_call`` (``all_variant_depths`` for every
sentence): the variants share the embedding, its residuals and block 0's attention (the same
operations on the same inputs), and the float64 query, key and value weights are stored in
the layout the forward reads (``linear_ready``), so no pass copies them again: the same
numbers, bit for bit, as one ``run_variant`` per variant and sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import pandas as pd
import torch
from torch import nn

from attnlens.hooks import ActivationCache
from attnlens.measures.collapse.residual import (
    collapse_dtype,
    collapse_table,
    depth_residuals,
    fit_table,
)
from attnlens.measures.collapse.variants import VARIANTS, parse_variants
from attnlens.model.attention import MultiHeadAttention, additive_attention_mask
from attnlens.model.transformer import HookedTransformer, TransformerBlock
from attnlens.stream.base import Analyzer, Batch
from attnlens.stream.sentence_sample import check_sample_options, sample_batch
from attnlens.stream.threads import limited_threads

# Sampled sentences held before the variants run over them (in one call, the weights cast once).
FLUSH_SENTENCES = 32


def block_variant(
    block: TransformerBlock,
    resid: torch.Tensor,
    mask: torch.Tensor | None,
    positions: torch.Tensor,
    switches: tuple[bool, bool, bool],
    attn_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``TransformerBlock.forward`` with the (skip, MLP, norm) ``switches``; ``[batch, pos, d]``.

    The same operations in the same order as the block's own forward (the ``full`` variant
    reproduces it exactly, which a test checks); a removed norm is the identity.
    ``attn_out``: the attention's output on this ``resid`` (``block_attention``), when
    another variant computed it already.
    """
    use_skip, use_mlp, use_norm = switches
    pre = block.cfg.norm_position == "pre"

    def ln1(x: torch.Tensor) -> torch.Tensor:
        return block.ln1(x) if use_norm else x

    def ln2(x: torch.Tensor) -> torch.Tensor:
        return block.ln2(x) if use_norm else x

    if attn_out is None:
        attn_out = block_attention(block, resid, mask, positions, use_norm)
    mid = resid + attn_out if use_skip else attn_out
    mid = mid if pre else ln1(mid)
    if not use_mlp:
        return mid
    mlp_out = block.mlp(ln2(mid) if pre else mid)
    post = mid + mlp_out if use_skip else mlp_out
    return post if pre else ln2(post)


def block_attention(
    block: TransformerBlock,
    resid: torch.Tensor,
    mask: torch.Tensor | None,
    positions: torch.Tensor,
    use_norm: bool,
) -> torch.Tensor:
    """The attention sub-layer of ``block_variant`` on ``resid [batch, pos, d]``: its input
    is ``resid`` (post-norm), or ``ln1(resid)`` with the norm switched on (pre-norm)."""
    pre = block.cfg.norm_position == "pre"
    attn_in = block.ln1(resid) if pre and use_norm else resid
    return block.attn(attn_in, mask=mask, positions=positions)


def attention_input_key(block: TransformerBlock, use_norm: bool) -> bool | None:
    """Variants with equal keys give block ``block``'s attention the same input (from the
    same ``resid``): all of a post-norm model's, a pre-norm model's with the same norm switch."""
    return use_norm if block.cfg.norm_position == "pre" else None


def variant_depths(
    model: HookedTransformer, inputs: dict[str, torch.Tensor], variant: str
) -> list[torch.Tensor]:
    """Hidden states at depths ``0 .. n_layers`` of ``model`` run as ``variant``.

    ``inputs``: ``input_ids`` and ``attention_mask`` ``[batch, pos]`` (``token_type_ids``
    optional). Depth 0 is the embedding output, depth ``l`` the output of block ``l - 1``.
    """
    switches = VARIANTS[parse_variants([variant])[0]]
    ids, attention_mask = inputs["input_ids"], inputs.get("attention_mask")
    positions = model.positions(ids, tuple(ids.shape), ids.device)
    resid = model.embed_tokens(ids, inputs.get("token_type_ids"), positions)
    n = ids.shape[1]
    mask = additive_attention_mask(attention_mask, n, n, model.cfg.causal, resid.dtype,
                                   resid.device)
    depths = [resid]
    for block, layer_mask in zip(model.blocks, model.layer_masks(mask, n), strict=True):
        resid = block_variant(block, resid, layer_mask, positions, switches)
        depths.append(resid)
    return depths


def all_variant_depths(
    model: HookedTransformer, inputs: dict[str, torch.Tensor], variants: Sequence[str]
):
    """``(variant, variant_depths(model, inputs, variant))`` for each of ``variants``, in
    order (a generator: one variant's depths at a time), sharing what the variants share:
    positions, the embedding (depth 0), the masks and block 0's attention output (the same
    operations on the same inputs, so the same numbers)."""
    ids, attention_mask = inputs["input_ids"], inputs.get("attention_mask")
    positions = model.positions(ids, tuple(ids.shape), ids.device)
    embedded = model.embed_tokens(ids, inputs.get("token_type_ids"), positions)
    n = ids.shape[1]
    mask = additive_attention_mask(attention_mask, n, n, model.cfg.causal, embedded.dtype,
                                   embedded.device)
    layer_masks = model.layer_masks(mask, n)
    # attention_input_key -> block 0's attention output [batch, pos, d]
    first_attention: dict[bool | None, torch.Tensor] = {}
    for variant in parse_variants(variants):
        switches = VARIANTS[variant]
        key = attention_input_key(model.blocks[0], switches[2])
        if key not in first_attention:
            first_attention[key] = block_attention(model.blocks[0], embedded, layer_masks[0],
                                                   positions, switches[2])
        resid, depths = embedded, [embedded]
        for layer, (block, layer_mask) in enumerate(zip(model.blocks, layer_masks,
                                                        strict=True)):
            shared = first_attention[key] if layer == 0 else None
            resid = block_variant(block, resid, layer_mask, positions, switches, shared)
            depths.append(resid)
        yield variant, depths


def bucket_residuals(
    model: HookedTransformer,
    buckets: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]],
    variants: Sequence[str],
) -> dict[str, list[torch.Tensor]]:
    """``{variant: [norm, depth, bucket sentences] per bucket}``: ``depth_residuals`` of
    every depth of every variant on each bucket's inputs (a sentence of ``sentence_inputs``,
    or any batch of them); depth 0, the embedding, shared by the variants, is read once per
    bucket."""
    out: dict[str, list[torch.Tensor]] = {v: [] for v in variants}
    for _, inputs in buckets:
        mask = inputs["attention_mask"]
        embedded = None
        for variant, hidden in all_variant_depths(model, inputs, variants):
            if embedded is None:
                embedded = depth_residuals(hidden[0], mask)
            per_depth = [embedded] + [depth_residuals(h, mask) for h in hidden[1:]]
            out[variant].append(torch.stack(per_depth, dim=1))  # [norm, depth, sentences]
    return out


class _OnWeights(nn.Module):
    """``variant_depths`` as a module, so ``functional_call`` can run it on other weights."""

    def __init__(self, model: HookedTransformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: dict[str, torch.Tensor], variant: str) -> list[torch.Tensor]:
        return variant_depths(self.model, inputs, variant)


class _AllOnWeights(nn.Module):
    """``bucket_residuals`` as a module: one ``functional_call`` runs every variant and
    bucket on other weights."""

    def __init__(self, model: HookedTransformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, buckets, variants: Sequence[str]) -> dict[str, list[torch.Tensor]]:
        return bucket_residuals(self.model, buckets, variants)


def cast_weights(model: HookedTransformer, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The model's parameters cast to ``dtype`` (a temporary set, named for ``_OnWeights``)."""
    return {f"model.{name}": p.detach().to(dtype) for name, p in model.named_parameters()}


def linear_ready(model: HookedTransformer, weights: dict[str, torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """``weights`` (``cast_weights``) with every attention's ``W_Q``, ``W_K`` and ``W_V``
    held as a view of a contiguous copy in the layout ``F.linear`` reads (``[head * d,
    d_in]``): the forward's rearrangement of each is then a view, not a copy per call, and
    ``F.linear`` gets the same contiguous numbers. ``W_O`` is left as it is: its
    rearrangement is a view already (``[d_out, head * d_v]`` with strides ``(1, d_out)``),
    and a contiguous copy would take another matrix-product path (other roundings)."""
    ready = dict(weights)
    for prefix, module in model.named_modules():
        if not isinstance(module, MultiHeadAttention):
            continue
        for name in ("W_Q", "W_K", "W_V"):
            key = f"model.{prefix}.{name}"
            w = ready[key]  # [head, d_in, d]
            heads, d_in, d = w.shape
            base = w.permute(0, 2, 1).reshape(heads * d, d_in).contiguous()  # [(head d), d_in]
            ready[key] = base.view(heads, d, d_in).permute(0, 2, 1)
    return ready


@torch.no_grad()
def run_all_variants(
    model: HookedTransformer,
    buckets: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]],
    variants: Sequence[str],
    weights: dict[str, torch.Tensor] | None = None,
) -> dict[str, list[torch.Tensor]]:
    """``bucket_residuals`` on the model's own weights, or on ``weights`` (``cast_weights``;
    one ``functional_call`` for every variant and bucket)."""
    if weights is None:
        return bucket_residuals(model, buckets, variants)
    return torch.func.functional_call(_AllOnWeights(model), linear_ready(model, weights),
                                      (buckets, variants))


@torch.no_grad()
def run_variant(
    model: HookedTransformer,
    inputs: dict[str, torch.Tensor],
    variant: str,
    weights: dict[str, torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """``variant_depths`` on the model's own weights, or on ``weights`` (``cast_weights``)."""
    if weights is None:
        return variant_depths(model, inputs, variant)
    return torch.func.functional_call(_OnWeights(model), weights, (inputs, variant))


def sentence_inputs(batches: Sequence[Batch], device: torch.device
                    ) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """The sentences of ``batches`` one by one: ``(order, inputs)`` per sentence, ``order
    [1]`` its place among all of them, ``inputs`` its real tokens ``[1, n]`` (views of one
    host-to-device copy per input).

    Each sentence runs alone at its own length (and ``_run_held`` runs them on one thread),
    so its residuals are the same bits whatever the batching, the held set, the process and
    the thread count: a float64
    product over the MLP's 1,536 inputs rounds otherwise when the rows beside it change (MKL
    splits the sum by the number of rows), and padding to a bucket's longest sentence changes
    the sums of the attention's rows."""
    names = ["input_ids", "attention_mask"]
    if all(b.token_type_ids is not None for b in batches):
        names.append("token_type_ids")
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for batch in batches:
        mask = batch.attention_mask.cpu().bool()  # [size, width]
        host = {name: getattr(batch, name).cpu() for name in names}
        for i, real in enumerate(mask):
            for name in names:
                rows[name].append(host[name][i][real])  # [n]
    lengths = [len(r) for r in rows["input_ids"]]
    # every sentence's tokens end to end [1, tokens], one copy to the device per input
    flat = {name: torch.cat(rows[name])[None].to(device) for name in names}
    order = torch.arange(len(lengths), device=device)  # [sentences]
    starts = [0, *accumulate(lengths)]
    return [(order[j:j + 1], {name: flat[name][:, starts[j]:starts[j + 1]] for name in names})
            for j in range(len(lengths))]


class VariantCollapse(Analyzer):
    """Relative residual per depth of block variants of a pretrained model, on a corpus.

    The variants run in ``dtype`` (``"float64"`` by default, so residuals resolve down to
    ~1e-16; None: the model's own dtype). The cost is bounded by ``max_sentences``: the
    sentences evenly spaced by corpus index (``stream.sentence_sample``), the same for any
    batching and process count; ``per_batch`` (at most that many of each batch's sampled
    sentences) depends on the batching. State: every sentence's residuals per variant, as in
    ``ResidualCollapse``.
    """

    name = "collapse_variants"
    # a sample by corpus index: each torchrun rank reads its share, merged in rank order
    distributed = "shard"
    needs_model_pass = True
    runs_beside = True  # one sentence at a time on one thread (_run_held)
    state_fields = ("values", "sentences")

    def __init__(
        self,
        n_layers: int,
        variants: str | Sequence[str] = tuple(VARIANTS),
        dtype: str | None = "float64",
        per_batch: int | None = None,
        max_sentences: int | None = None,
    ) -> None:
        check_sample_options(per_batch, max_sentences)
        self.n_layers = n_layers
        self.variants = parse_variants(variants)
        self.dtype = dtype
        self.per_batch, self.max_sentences = per_batch, max_sentences
        self.values: dict[str, list[torch.Tensor]] = {v: [] for v in self.variants}
        self.sentences = 0
        self._seen = 0  # sentences fed, sampled or not (indices of batches without any)
        self._held: list[Batch] = []  # sampled sentences whose variants have not run yet
        self._model: HookedTransformer | None = None

    @classmethod
    def for_model(cls, model: HookedTransformer, **kwargs) -> VariantCollapse:
        """Variants of ``model``; float64 unless the model is too large (``collapse_dtype``)."""
        if "dtype" not in kwargs:
            dtype = collapse_dtype(model)
            kwargs["dtype"] = None if dtype is None else str(dtype).removeprefix("torch.")
        analyzer = cls(model.n_layers, **kwargs)
        analyzer.identify_model(model)
        return analyzer

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "variants": self.variants, "dtype": self.dtype,
                "per_batch": self.per_batch, "max_sentences": self.max_sentences}

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return []  # the variants run forward passes of their own (model_pass)

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        """Nothing to read from the main forward pass."""

    def model_pass(self, model: HookedTransformer, batch: Batch) -> None:
        seen, self._seen = self._seen, self._seen + batch.size
        batch, _ = sample_batch(batch, self.per_batch, self.max_sentences, seen)
        n = batch.size
        if n == 0:
            return
        self._model = model
        self._held.append(batch)
        self.sentences += n
        held = sum(b.size for b in self._held)
        if held >= FLUSH_SENTENCES or self.sentences == self.max_sentences:
            self._run_held()

    def _run_held(self) -> None:
        """Run every variant over the held sentences, one pass per sentence, and append
        their residuals ``[norm, depth, sentence]`` in the order the sentences came."""
        held, self._held = self._held, []
        if not held:
            return
        model = self._model
        buckets = sentence_inputs(held, model.device)
        dtype = None if self.dtype is None else getattr(torch, self.dtype)
        weights = cast_weights(model, dtype) if dtype not in (None, model.dtype) else None
        total = sum(b.size for b in held)
        with limited_threads(1):  # one thread: the same bits at any thread count
            residuals = run_all_variants(model, buckets, self.variants, weights)
        for variant in self.variants:
            out = None
            for (order, _), values in zip(buckets, residuals[variant], strict=True):
                if out is None:  # values [norm, depth, bucket sentences]
                    out = values.new_zeros(*values.shape[:2], total)
                out[..., order] = values
            self.values[variant].append(out)  # [norm, depth, held sentences]

    def state_dict(self) -> dict:
        self._run_held()  # nothing may stay held in a shipped state
        return super().state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._held = []
        super().load_state_dict(state)

    def merge(self, other: Analyzer) -> Analyzer:
        self._run_held()  # this run's sentences before the other's, as in one run
        return super().merge(other)

    def result(self) -> dict[str, pd.DataFrame]:
        self._run_held()
        tables = []
        for variant in self.variants:
            parts = [v.cpu() for v in self.values[variant]]
            values = torch.cat(parts, dim=-1) if parts else torch.zeros(2, self.n_layers + 1, 0)
            tables.append(collapse_table(values.numpy(), variant))
        curves = pd.concat(tables, ignore_index=True)
        return {"collapse_variants": curves, "collapse_fits": fit_table(curves)}
