"""The fast-weight / linear-attention view of each head (Schlag et al. 2021; Katharopoulos
et al. 2020).

Without the softmax a head is a fast-weight memory: it writes ``W = Σ_j v_j k_j^T`` and
reads ``W q_i``. Reading returns ``v_i`` exactly only when the keys are orthogonal; otherwise
the associations interfere, and a ``d_head``-wide head can hold at most ``d_head``
orthogonal keys. Per head, over the sentences of a corpus (each sentence weighs the same;
keys and values of real tokens only, special tokens included; query ``q`` and key ``k`` as the
head uses them: after rotary embedding for RoPE models; query head ``h`` reads key/value
head ``h // group`` under grouped-query attention):

- ``interference``: mean ``|cos(k_i, k_j)|`` over pairs of distinct keys ``i != j`` of a
  sentence (0 for orthogonal keys, 1 for parallel ones);
- ``effective_keys``: the participation ratio ``(Σ λ)^2 / Σ λ^2`` of the eigenvalues of the
  Gram matrix of the unit-normalised keys, ``C = K̂ K̂^T`` (so ``n^2 / ||C||_F^2``): 1 when
  all keys are parallel, ``n`` when they are orthogonal, never above ``min(n, d_head)``'s
  rank; ``effective_keys_frac`` divides it by ``min(n, d_head)``; ``length`` is the mean ``n``;
- ``linear_error``: ``||O_lin - O||_F / ||O||_F`` with ``O = softmax(Q K^T / sqrt(d)) V`` (the
  head's real pattern times its values) and ``O_lin`` the normalised linear attention of
  Katharopoulos et al. with ``φ(x) = elu(x) + 1`` applied to ``q`` and ``k`` as they are:
  ``O_lin[i] = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j)``;
- ``raw_error``: the same for the unnormalised ``(Q K^T) V`` (no scale, no softmax: the
  fast-weight read-out ``W q_i``), and ``raw_error_rescaled`` after the best single gain
  ``c = <O_raw, O> / ||O_raw||^2`` per sentence and head (0 when the read-out is exact up to
  a scale, e.g. orthonormal keys read by their own directions).

Sums run over visible keys only: real tokens, and ``j <= i`` in causal models, so the linear
attentions are causal there too. Errors use the real query rows. The most linearisable heads
have the smallest ``linear_error``.

On the CPU, float32 inputs go to a C kernel instead (``_linear_kernel.c``, built by setup.py
where a compiler is present): one pass per (sentence, head) gives the key geometry and the
three errors, every product and sum in float64 (the torch path, kept for GPUs and as the
float64 reference, rounds to float32 between operations: the two agree to float32 rounding,
the kernel and that path in float64 to float64 rounding).
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.sentence_sample import check_sample_options, sample_batch
from attnlens.stream.threads import run_split

try:  # the C kernel (setup.py builds it where a compiler is present)
    from attnlens.measures.linear import _linear_kernel
except ImportError:  # pragma: no cover - the torch path then runs everywhere
    _linear_kernel = None

MEASURES = (
    "interference",
    "effective_keys",
    "effective_keys_frac",
    "length",
    "linear_error",
    "raw_error",
    "raw_error_rescaled",
)
LENGTH_EDGES = (8, 16, 32, 64, 128, 256)  # buckets 1-8, 9-16, ..., 129-256, 257+


def per_query_head(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[batch, pos, kv_head, d]`` -> ``[batch, head, pos, d]``: query head ``h`` gets key/value
    head ``h // (n_heads / n_kv_heads)`` (grouped-query attention; a view when equal)."""
    x = x.transpose(1, 2)  # [batch, kv_head, pos, d]
    group = n_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """Katharopoulos et al.'s positive feature map ``elu(x) + 1``."""
    return F.elu(x) + 1.0


def relative_error(
    approx: torch.Tensor, exact: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """``||approx - exact||_F / ||exact||_F`` over real query rows, per ``[batch, head]``.

    ``approx``/``exact [batch, head, query_pos, d]``, ``rows [batch, query_pos]``.
    """
    weight = rows[:, None, :, None].to(exact.dtype)
    return _error_over(approx, exact, weight, _weighted_norm(exact, weight))


def _weighted_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``||x * weight||_F`` per ``[batch, head]`` (``x * x``: square's own arithmetic)."""
    x = x * weight
    return (x * x).sum((-2, -1)).sqrt()


def _error_over(approx: torch.Tensor, exact: torch.Tensor, weight: torch.Tensor,
                norm: torch.Tensor) -> torch.Tensor:
    """``relative_error`` with the weight ``[batch, 1, query_pos, 1]`` and ``||exact||``
    given (computed once for every approximation of the same ``exact``)."""
    diff = (approx - exact) * weight
    return (diff * diff).sum((-2, -1)).sqrt() / norm.clamp_min(torch.finfo(exact.dtype).tiny)


def rescaled_error(approx: torch.Tensor, exact: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``relative_error`` of ``c · approx`` with the best gain ``c = <approx, exact> /
    ||approx||^2`` per sentence and head (real query rows): ``[batch, head]``."""
    weight = rows[:, None, :, None].to(approx.dtype)
    return _rescaled_over(approx, exact, weight, _weighted_norm(exact, weight))


def _rescaled_over(approx: torch.Tensor, exact: torch.Tensor, weight: torch.Tensor,
                   norm: torch.Tensor) -> torch.Tensor:
    """``rescaled_error`` with the weight and ``||exact||`` given (as ``_error_over``)."""
    approx_w = approx * weight
    gain = (approx * exact * weight).sum((-2, -1)) / (approx_w * approx_w).sum(
        (-2, -1)).clamp_min(torch.finfo(approx.dtype).tiny)  # [batch, head]
    return _error_over(gain[..., None, None] * approx, exact, weight, norm)


def key_geometry(
    keys: torch.Tensor, real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(interference, effective number of keys), each ``[batch, head]``.

    ``keys [batch, head, key_pos, d_head]``; ``real [batch, key_pos]``. Sentences with fewer
    than two keys have interference 0.
    """
    unit = F.normalize(keys, dim=-1) * real[:, None, :, None].to(keys.dtype)
    gram = unit @ unit.mT  # [batch, head, key_pos, key_pos]: cosines of real keys
    n = real.sum(-1).to(keys.dtype)[:, None]  # [batch, 1]
    trace = gram.diagonal(dim1=-2, dim2=-1).sum(-1)  # [batch, head]: n for non-zero keys
    frob = (gram * gram).sum((-2, -1))  # ||C||_F^2 = Σ λ^2 (C is symmetric)
    effective = trace.square() / frob.clamp_min(torch.finfo(keys.dtype).tiny)
    off_diagonal = gram.abs().sum((-2, -1)) - gram.diagonal(dim1=-2, dim2=-1).abs().sum(-1)
    pairs = n * (n - 1)
    interference = torch.where(pairs > 0, off_diagonal / pairs.clamp_min(1), 0.0)
    return interference, effective


def linear_outputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, real: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised elu+1 linear attention, unnormalised ``(Q K^T) V``) over visible keys.

    ``q``/``k [batch, head, pos, d_head]``, ``v [batch, head, key_pos, d_head_v]``,
    ``real [batch, key_pos]`` the real keys; ``causal``: query ``i`` sees keys ``j <= i``.
    Returns two ``[batch, head, query_pos, d_head_v]``. Without a causal mask the products are
    taken in the linear-time order ``φ(Q) (φ(K)^T V)``; with it, through the ``n x n`` kernel
    matrix (the same numbers as the causal recurrence).
    """
    key_mask = real[:, None, :, None].to(q.dtype)  # [batch, 1, key_pos, 1]
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k) * key_mask
    tiny = torch.finfo(q.dtype).tiny
    if not causal:
        memory = phi_k.mT @ v  # [batch, head, d_head, d_head_v]: Σ_j φ(k_j) v_j^T
        normaliser = phi_q @ phi_k.sum(-2, keepdim=True).mT  # [batch, head, query_pos, 1]
        raw = q @ ((k * key_mask).mT @ v)  # Q (K^T V)
        return phi_q @ memory / normaliser.clamp_min(tiny), raw
    n = q.shape[-2]
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    kernel = (phi_q @ phi_k.mT).masked_fill(future, 0.0)  # [batch, head, query_pos, key_pos]
    kernel = kernel / kernel.sum(-1, keepdim=True).clamp_min(tiny)
    scores = (q @ (k * key_mask).mT).masked_fill(future, 0.0)
    return kernel @ v, scores @ v


class LinearAttentionView(HeadPatternAnalyzer):
    """Streaming fast-weight / linear-attention measures per head (see the module docstring)."""

    name = "linear_attention"
    # a sample by corpus index: each torchrun rank reads its share, merged in rank order
    distributed = "shard"
    hook_kinds = ("q", "k", "v", "pattern")
    state_fields = ("sums", "sentences", "by_length", "length_counts")
    # the precision of the per-sentence arithmetic (float64: a reference for the tests)
    compute_dtype = torch.float32

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        d_head: int,
        causal: bool = False,
        per_batch: int | None = None,
        max_sentences: int | None = None,
        device: torch.device | str = "cpu",
        heads_per_layer: list[int] | None = None,
    ) -> None:
        check_sample_options(per_batch, max_sentences)
        self.per_batch, self.max_sentences = per_batch, max_sentences
        # heads each layer really has (structurally pruned models): only those are listed
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.d_head, self.causal = d_head, causal
        kwargs = {"dtype": torch.float64, "device": device}
        self.sums = torch.zeros(len(MEASURES), n_layers, n_heads, **kwargs)
        self.sentences = 0
        # effective_keys summed per length bucket, and sentences per bucket
        self.by_length = torch.zeros(n_layers, n_heads, len(LENGTH_EDGES) + 1, **kwargs)
        self.length_counts = torch.zeros(len(LENGTH_EDGES) + 1, **kwargs)
        self._seen = 0  # sentences fed, sampled or not (indices of batches without any)
        self._held = HeldLayers()

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {**cls.head_shape(model), "d_head": model.cfg.d_head, "causal": model.cfg.causal,
                "device": model.device}

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "d_head": self.d_head,
                "causal": self.causal, "per_batch": self.per_batch,
                "max_sentences": self.max_sentences, "heads_per_layer": self.heads_per_layer}

    def begin_batch(self, batch: Batch) -> None:
        seen, self._seen = self._seen, self._seen + batch.size
        batch, self._rows = sample_batch(batch, self.per_batch, self.max_sentences, seen)
        self._skip = batch.size == 0
        if self._skip:
            return
        real = batch.attention_mask.bool()  # [batch, pos]
        self._real = real
        # the sample's sentences of the fed batch, as the C kernel reads them where they lie
        self._picked = (torch.arange(batch.size) if self._rows is None
                        else self._rows).numpy()  # [batch] int64 (host: sampled_rows)
        self._length = real.sum(-1)  # [batch]
        edges = torch.tensor(LENGTH_EDGES, device=real.device)
        bucket = torch.bucketize(self._length, edges)  # [batch]: 1-8 -> 0, 9-16 -> 1, ...
        self._bucket = F.one_hot(bucket, len(LENGTH_EDGES) + 1).double()  # [batch, bucket]
        self.length_counts += self._bucket.sum(0).to(self.length_counts.device)
        self.sentences += batch.size

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        if self._skip:
            return
        tensors = [cache[name, layer] for name in ("pattern", "q", "k", "v")]
        # the sample's elements: the layers fold together as when a copy of it was held
        # (the sums of a fold's layers are taken together: the same bits need the same folds)
        counted = sum(x.numel() // batch.size * len(self._picked) for x in tensors)
        if self._rows is not None and not self._uses_kernel(tensors[0]):
            # the sample copied out (the C kernel reads its sentences where they lie)
            tensors = [x.index_select(0, self._rows.to(x.device)) for x in tensors]
        # held, then folded several layers at a time as more heads (stream.held_layers)
        if self._held.add(layer, *tensors, counted=counted):
            self._fold_held()

    def end_batch(self, batch: Batch) -> None:
        if not self._skip:
            self._fold_held()

    def _fold_held(self) -> None:
        # pattern [batch, head, query_pos, key_pos]; q, k, v [batch, pos, kv_head, d]: the
        # held layers' heads side by side, layer-major (layer * n_heads + head)
        if self._held and self._uses_kernel(self._held.tensors[0][0]):
            # the C kernel reads each held layer where it lies (concatenating the layers
            # would copy them once more, torch.cat), one call after the other (a torch
            # operation between two calls leaves its threads spinning beside the kernel's)
            for layers, held in self._held.take_apart():
                measures = torch.cat([self._kernel_measures(*x) for x in held], 1)
                self._add(layers, *measures.unbind(-1))  # [batch, layer * head] each
            return
        for layers, tensors in self._held.take(dims=(1, 2, 2, 2)):
            pattern, q, k, v = (x.to(self.compute_dtype) for x in tensors)
            self._add(layers, *self._torch_measures(pattern, q, k, v))

    def _uses_kernel(self, pattern: torch.Tensor) -> bool:
        """Whether the C kernel folds this pattern: built, a CPU pattern, float32 arithmetic
        (``compute_dtype``; float64 is the tests' reference and takes the torch path)."""
        return (_linear_kernel is not None and pattern.device.type == "cpu"
                and self.compute_dtype == torch.float32)

    def _kernel_measures(self, pattern: torch.Tensor, q_kv: torch.Tensor, k_kv: torch.Tensor,
                         v_kv: torch.Tensor) -> torch.Tensor:
        """``_torch_measures``' five results by the C kernel (``_linear_kernel.c``: one pass
        per (sentence, head), every sum in float64), as ``[batch, head, 5]`` float64, for the
        sample's sentences (``_picked``) of the fed batch's tensors. The pairs are split
        between the intra-op threads (the kernel releases the GIL)."""
        # [total, head, n, n] and [total, n, *, d], float32 (compute_dtype)
        pattern, q, k, v = (x.detach().to(self.compute_dtype).contiguous()
                            for x in (pattern, q_kv, k_kv, v_kv))
        total, n_all, n, _ = pattern.shape
        batch = len(self._picked)
        out = torch.empty(batch, n_all, 5, dtype=torch.float64)
        args = (pattern.numpy(), q.numpy(), k.numpy(), v.numpy(),
                self._real.to(torch.uint8).contiguous().numpy(), self._picked, total, batch,
                n_all, n, k.shape[2], k.shape[3], v.shape[3], self.causal)
        buffer = out.numpy()
        run_split(lambda first, stop: _linear_kernel.fold(*args, first, stop, buffer),
                  batch * n_all)
        return out

    def _torch_measures(self, pattern: torch.Tensor, q_kv: torch.Tensor, k_kv: torch.Tensor,
                        v_kv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(interference, effective keys, linear, raw and rescaled raw error), each
        ``[batch, head]``, of the held layers' heads side by side (the GPU's path)."""
        n_all = pattern.shape[1]  # len(layers) * heads per layer
        # [batch, head, pos, d], contiguous once (each product would copy the views again)
        q, k, v = (per_query_head(x, n_all).contiguous() for x in (q_kv, k_kv, v_kv))
        rows = self._real
        weight = rows[:, None, :, None].to(pattern.dtype)  # [batch, 1, query_pos, 1]
        exact = pattern @ v  # [batch, head, query_pos, d_head_v]
        norm = _weighted_norm(exact, weight)  # [batch, head], shared by the three errors
        lin, raw = linear_outputs(q, k, v, rows, self.causal)
        kv_keys = k_kv.transpose(1, 2)  # [batch, kv_head, pos, d]
        group = n_all // kv_keys.shape[1]
        interference, effective = (  # per kv head, then shared by its query heads
            x.repeat_interleave(group, dim=1) for x in key_geometry(kv_keys, rows))
        return (interference, effective, _error_over(lin, exact, weight, norm),
                _error_over(raw, exact, weight, norm), _rescaled_over(raw, exact, weight, norm))

    def _add(self, layers: list[int], interference: torch.Tensor, effective: torch.Tensor,
             linear_error: torch.Tensor, raw_error: torch.Tensor, rescaled: torch.Tensor
             ) -> None:
        """Add the measures of ``layers`` (their heads stacked on the head axis, each
        ``[batch, layer * head]``) to the sums."""
        n_heads = effective.shape[1] // len(layers)
        length = self._length.to(effective.dtype)[:, None]  # [batch, 1]
        capacity = length.clamp(max=self.d_head).clamp_min(1)
        per_sentence = torch.stack([
            interference,
            effective,
            effective / capacity,
            length.expand_as(effective),
            linear_error,
            raw_error,
            rescaled,
        ])  # [measure, batch, layer * head]
        sums = per_sentence.double().sum(1).unflatten(-1, (len(layers), n_heads))
        add_to_layers(self.sums.transpose(0, 1), layers, sums.transpose(0, 1))  # [layer, m, h]
        by_length = (effective.double().mT @ self._bucket).unflatten(0, (len(layers), n_heads))
        add_to_layers(self.by_length, layers, by_length)  # [layer, head, bucket]

    def result(self) -> dict[str, pd.DataFrame]:
        means = (self.sums / max(self.sentences, 1)).cpu().numpy()
        records = [
            {"layer": layer, "head": head, "measure": measure,
             "value": float(means[m, layer, head])}
            for m, measure in enumerate(MEASURES)
            for layer in range(self.n_layers)
            for head in range(self.heads_per_layer[layer])  # only heads the model has
        ]
        counts = self.length_counts.cpu().numpy()
        by_length = self.by_length.cpu().numpy()
        lows = (1, *(e + 1 for e in LENGTH_EDGES))
        highs = (*LENGTH_EDGES, None)
        length_rows = [
            {"layer": layer, "head": head,
             "lengths": f"{lo}-{hi}" if hi is not None else f"{lo}+",
             "sentences": int(counts[b]), "d_head": self.d_head,
             "effective_keys": float(by_length[layer, head, b] / counts[b])}
            for layer in range(self.n_layers)
            for head in range(self.heads_per_layer[layer])  # only heads the model has
            for b, (lo, hi) in enumerate(zip(lows, highs, strict=True))
            if counts[b] > 0
        ]
        return {"linear_attention": pd.DataFrame.from_records(records),
                "linear_keys_by_length": pd.DataFrame.from_records(length_rows)}
