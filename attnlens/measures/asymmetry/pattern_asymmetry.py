"""How asymmetric are attention patterns? Each head's pattern as a directed graph.

(The weights' side, the query/key bilinear form, is ``weight_asymmetry``.)

**Patterns** (streaming, real tokens only). Per head and sentence, ``P [n, n]``:

- ``asym_ratio = ||P - P^T||_F / ||P||_F`` averaged over sentences (in ``[0, sqrt(2)]`` for
  non-negative ``P``; 0 for a symmetric pattern);
- the attention graph has an *edge* ``i -> j`` (``i != j``) when ``p_ij >= edge_level / n``
  (by default: at least uniform attention);
- ``directed_share``: among unordered pairs ``{i, j}`` with at least one edge, the share where
  the stronger direction carries at least ``factor`` (default 2) times the weaker one;
- ``reciprocity``: the share of edges whose reverse is also an edge (Newman's reciprocity).
  Both pooled over the corpus (ratio of total counts).

**Baseline**: unweighted self-attention ``alpha = softmax(X X^T / sqrt(C))`` on the attention
layer's own input ``X [n, C]`` (``hook_resid_pre`` for post-norm models such as BERT,
``ln1(hook_resid_pre)`` for pre-norm models, with ``ln1`` taken as plain tensors at
construction), with the same measures. Its logits are
symmetric, which implies ``alpha_ij alpha_ji <= alpha_ii alpha_jj`` (``product_violations``:
share of pairs breaking it, 0 up to rounding); the stronger claim ``alpha_ij <= max(alpha_ii,
alpha_jj)`` is checked too (``dominance_violations``: share of ordered pairs ``i != j``
breaking it, pooled).

**Computation.** On the CPU a C kernel (``_asymmetry_kernel.c``, ``kernel_pattern_asymmetry``)
visits each unordered pair ``{i, j}`` of each (sentence, head) matrix's real block once,
reading ``p_ij`` and ``p_ji``: both squared norms summed in float64, the four counts with the
torch path's comparisons in the pattern's dtype (the level ``edge_level / n`` and
``factor * p`` rounded as torch rounds them), so the counts are the same integers and the
ratios differ from the torch path's float32 norms in float32 rounding; the baseline's
float64 ``alpha`` (still computed by torch) goes through the same kernel, its violations
counted in the same pass. It is called once per layer. The torch path
(``masked_pattern_asymmetry``, ``masked_dominance_violations``: about 15 whole-tensor
operations, several layers concatenated into one call) runs on GPUs, without the built
extension, and for other dtypes, and is the tests' reference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.folding import NormParams, attention_input_norm
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers

try:  # built by `pip install` where a C compiler is present (setup.py); optional
    from attnlens.measures.asymmetry import _asymmetry_kernel
except ImportError:  # pragma: no cover - exercised where the build was skipped
    _asymmetry_kernel = None

PATTERN_MEASURES = ("asym_ratio", "directed_share", "reciprocity")
BASELINE_MEASURES = (*PATTERN_MEASURES, "product_violations", "dominance_violations")
# Count slots kept per layer/head: edges, reciprocated edges, pairs with an edge, directed pairs.
_COUNTS = 4
RELATIVE_TOL = 1e-9


# --- patterns -----------------------------------------------------------------------------
def pattern_asymmetry(
    P: torch.Tensor, factor: float = 2.0, edge_level: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-matrix ``asym_ratio [...]`` and graph counts ``[..., 4]`` of ``P [..., n, n]``.

    Counts: edges, reciprocated edges, unordered pairs with at least one edge, and those of
    them that are directed (stronger direction >= ``factor`` x weaker). One sentence whose
    tokens are all real: ``masked_pattern_asymmetry`` below with a batch of one.
    """
    n = P.shape[-1]
    ratio, counts = masked_pattern_asymmetry(P[None], *_all_real(n, P.device), factor,
                                             edge_level)
    return ratio[0], counts[0]


def dominance_violations(alpha: torch.Tensor) -> torch.Tensor:
    """Counts ``[..., 3]``: ordered pairs ``i != j``, product and max-diagonal violations."""
    n = alpha.shape[-1]
    flat = alpha.reshape(-1, n, n)  # [matrices, n, n]
    pairs, lengths = _all_real(n, alpha.device)
    counts = masked_dominance_violations(flat, pairs, lengths.expand(flat.shape[0]))
    return counts.reshape(*alpha.shape[:-2], 3)


def unweighted_attention(X: torch.Tensor) -> torch.Tensor:
    """``softmax(X X^T / sqrt(C))`` for ``X [..., n, C]`` in float64: ``[..., n, n]``."""
    X = X.double()
    return torch.softmax(X @ X.mT / X.shape[-1] ** 0.5, dim=-1)


def _all_real(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``pairs [1, n, n]`` all True and ``lengths [1]`` = n: one sentence without padding."""
    return (torch.ones(1, n, n, dtype=torch.bool, device=device),
            torch.full((1,), n, dtype=torch.long, device=device))


# --- the same on padded batches, every sentence at once -------------------------------------
# ``pattern_asymmetry``, ``dominance_violations`` and ``unweighted_attention`` above take one
# sentence's real-token block (or a stack of equal lengths). The analyzer instead reads the
# padded batch in one call per layer: entries outside a sentence's real block are set to 0, which
# adds nothing to the norms and makes no edge (the edge level is positive), so the counts are
# the same integers and the norms the same sums in another order (float32 rounding).
_MASKS: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _upper_and_off(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, n]`` strict upper triangle and off-diagonal masks (made once per size)."""
    key = (n, str(device))
    if key not in _MASKS:
        upper = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
        _MASKS[key] = (upper, ~torch.eye(n, dtype=torch.bool, device=device))
    return _MASKS[key]


def real_pairs(mask: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, pos]`` True where query and key are both real tokens (``mask [batch,
    pos]``)."""
    mask = mask.bool()
    return mask[:, :, None] & mask[:, None, :]


def masked_pattern_asymmetry(
    P: torch.Tensor, pairs: torch.Tensor, lengths: torch.Tensor, factor: float = 2.0,
    edge_level: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``pattern_asymmetry`` of each sentence's real block of a padded ``P [batch, ..., pos,
    pos]``: ``asym_ratio [batch, ...]`` and counts ``[batch, ..., 4]``.

    ``pairs [batch, pos, pos]`` (``real_pairs``), ``lengths [batch]`` real tokens (> 0).
    """
    extra = P.dim() - 3  # head axes between batch and the matrix
    pairs = pairs.reshape(pairs.shape[0], *([1] * extra), *pairs.shape[1:])
    P = P * pairs.to(P.dtype)  # 0 outside the real block (as torch.where, for finite P)
    Pt = P.mT.contiguous()  # read once in the transposed order, then contiguously
    norm = torch.linalg.matrix_norm(P).double().clamp_min(torch.finfo(torch.float64).tiny)
    ratio = torch.linalg.matrix_norm(P - Pt).double() / norm
    # the level edge_level / n in float64, then in P's dtype (as a Python float would be)
    level = (edge_level / lengths.to(torch.float64)).to(P.dtype)
    level = level.reshape(-1, *([1] * (P.dim() - 1)))
    if factor < 2:
        return ratio, _pair_counts(P, Pt, level, factor)
    # Counted over ordered pairs, the diagonal included, then corrected: a diagonal edge is
    # its own reverse, and each unordered pair with an edge is (edges - mutual / 2). With
    # factor >= 2, p_ij >= factor * p_ji (rounded) holds for at most one direction of a pair
    # and never on the diagonal (fl(factor * p) >= 2 p > p for p > 0), and only where p_ij is
    # the larger entry, which then carries the pair's edge if it has one: the same count as
    # the stronger direction over the pairs with an edge (``_pair_counts``).
    edge = level <= P  # [batch, ..., query_pos, key_pos], the diagonal included
    loops = edge.diagonal(dim1=-2, dim2=-1).sum(-1, dtype=torch.int32)  # [batch, ...]
    edges = _counted(edge) - loops
    mutual = _counted(edge & edge.mT.contiguous()) - loops
    directed = _counted(edge & (factor * Pt <= P))
    counts = torch.stack([edges, mutual, edges - mutual // 2, directed], dim=-1).double()
    return ratio, counts


def _counted(x: torch.Tensor) -> torch.Tensor:
    """True entries per matrix of a bool ``x [..., n, n]``: ``[...]`` int32 (summed as bytes;
    a bool sum would first widen every entry to int64)."""
    return x.view(torch.uint8).sum(dim=(-1, -2), dtype=torch.int32)


def _pair_counts(P: torch.Tensor, Pt: torch.Tensor, level: torch.Tensor, factor: float
                 ) -> torch.Tensor:
    """``masked_pattern_asymmetry``'s counts ``[..., 4]`` by their definition, any factor:
    edges, reciprocated edges, unordered pairs with an edge and the directed ones among them."""
    upper, off = _upper_and_off(P.shape[-1], P.device)
    edge = (level <= P) & off
    edge_t = edge.mT
    mutual = edge & edge_t
    any_edge = (edge | edge_t) & upper
    directed = any_edge & (torch.maximum(P, Pt) >= factor * torch.minimum(P, Pt))
    return torch.stack(
        [m.sum(dim=(-1, -2)) for m in (edge, mutual, any_edge, directed)], dim=-1
    ).double()


def masked_unweighted_attention(X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``unweighted_attention`` of each sentence's real tokens of ``X [batch, ..., pos, C]``
    (``...``: e.g. layers): ``[batch, ..., pos, pos]`` in float64, 0 outside the real block."""
    X = X.double()
    extra = [1] * (X.dim() - 3)  # axes between batch and the matrix
    keys = ~mask.bool().reshape(mask.shape[0], *extra, 1, mask.shape[1])  # [batch, ..., 1, pos]
    logits = (X @ X.mT / X.shape[-1] ** 0.5).masked_fill(keys, -torch.inf)
    alpha = torch.softmax(logits, dim=-1)
    pairs = real_pairs(mask)
    return torch.where(pairs.reshape(pairs.shape[0], *extra, *pairs.shape[1:]), alpha, 0)


def masked_dominance_violations(alpha: torch.Tensor, pairs: torch.Tensor,
                                lengths: torch.Tensor) -> torch.Tensor:
    """``dominance_violations`` of each sentence's real block of ``alpha [batch, ..., pos,
    pos]`` (0 outside it; ``pairs [batch, ..., pos, pos]`` broadcast over ``...``, ``lengths
    [batch]``): ``[batch, ..., 3]``."""
    diag = alpha.diagonal(dim1=-2, dim2=-1)  # [batch, pos]
    _, off = _upper_and_off(alpha.shape[-1], alpha.device)
    off = off & pairs
    tol = 1 + RELATIVE_TOL
    product = (alpha * alpha.mT > tol * diag[..., :, None] * diag[..., None, :]) & off
    dominance = (alpha > tol * torch.maximum(diag[..., :, None], diag[..., None, :])) & off
    n = lengths.to(torch.float64).reshape(-1, *([1] * (alpha.dim() - 3)))
    product, dominance = _counted(product).double(), _counted(dominance).double()
    return torch.stack([(n * (n - 1)).expand_as(product), product, dominance], -1)


# --- the same by the C kernel (CPU) ---------------------------------------------------------
def kernel_available(P: torch.Tensor) -> bool:
    """Whether ``kernel_pattern_asymmetry`` can read ``P``: the extension is built, ``P`` is on
    the CPU and float32 or float64."""
    return (_asymmetry_kernel is not None and P.device.type == "cpu"
            and P.dtype in (torch.float32, torch.float64))


def kernel_pattern_asymmetry(
    P: torch.Tensor, mask: torch.Tensor, factor: float = 2.0, edge_level: float = 1.0,
    violations: bool = False,
) -> tuple[torch.Tensor, ...]:
    """``masked_pattern_asymmetry`` (and, with ``violations``, ``masked_dominance_violations``
    of float64 input) by the C kernel: ``P [batch, ..., pos, pos]`` on the CPU, float32 or
    float64, ``mask [batch, pos]`` (real tokens; entries outside the real block are not read).

    Returns ``asym_ratio [batch, ...]``, counts ``[batch, ..., 4]`` (and violations ``[batch,
    ..., 3]``), float64. The counts are the torch path's integers; the norms are summed in
    float64 (the torch path: float32 for float32 ``P``), so ratios differ in float32 rounding.
    """
    P = (P.detach() if P.requires_grad else P).contiguous()  # no-ops in the analyzer
    batch, pos = mask.shape
    heads = P.shape[1:-2]  # [...]
    per_sentence = P[0, ..., 0, 0].numel() if batch else 0
    ratio = torch.empty(batch, *heads, dtype=torch.float64)
    counts = torch.empty(batch, *heads, _COUNTS, dtype=torch.float64)
    broken = torch.empty(batch, *heads, 3, dtype=torch.float64) if violations else None
    _asymmetry_kernel.asymmetry(
        P.numpy(), _mask_bytes(mask).numpy(), ratio.numpy(), counts.numpy(),
        None if broken is None else broken.numpy(), per_sentence, pos, float(factor),
        float(edge_level), 1 + RELATIVE_TOL, P.dtype == torch.float64)
    return (ratio, counts) if broken is None else (ratio, counts, broken)


def _mask_bytes(mask: torch.Tensor) -> torch.Tensor:
    """``mask [batch, pos]`` as contiguous bytes, nonzero for real tokens (a bool mask as is)."""
    if mask.dtype not in (torch.bool, torch.uint8):
        mask = mask.bool()
    return mask.contiguous()


class PatternAsymmetry(HeadPatternAnalyzer):
    """Streaming asymmetry of attention patterns per head, plus the unweighted baseline.

    Layerwise: each layer's patterns (and residual input, for the baseline) are folded in as
    the forward pass produces them; the running sums stay on the activations' device.
    ``input_norms[layer]`` is the norm between the residual stream and that layer's attention
    (pre-norm models; ``NormParams``, plain tensors) or None.
    """

    name = "pattern_asymmetry"
    state_fields = ("sentences", "ratio_sum", "counts", "base_ratio_sum", "base_counts",
                    "base_violations")

    def __init__(
        self,
        heads_per_layer: list[int],
        factor: float = 2.0,
        edge_level: float = 1.0,
        baseline: bool = True,
        input_norms: list[NormParams | None] | None = None,
    ) -> None:
        if factor < 1:
            raise ConfigError(f"the direction factor must be at least 1, not {factor}.")
        if edge_level <= 0:
            raise ConfigError(f"the edge level must be positive, not {edge_level}.")
        self.set_heads(heads_per_layer)
        self.factor, self.edge_level, self.baseline = factor, edge_level, baseline
        self.input_norms = list(input_norms or [None] * self.n_layers)
        f64 = torch.float64
        self.sentences = 0
        self.ratio_sum = torch.zeros(self.n_layers, self.n_heads, dtype=f64)
        self.counts = torch.zeros(self.n_layers, self.n_heads, _COUNTS, dtype=f64)
        self.base_ratio_sum = torch.zeros(self.n_layers, dtype=f64)
        self.base_counts = torch.zeros(self.n_layers, _COUNTS, dtype=f64)
        self.base_violations = torch.zeros(self.n_layers, 3, dtype=f64)
        self._lengths = self._weights = self._pairs = self._mask = None
        self._held = HeldLayers()  # the torch path: patterns (and the baseline's inputs)
        self._held_inputs = HeldLayers()  # the kernel path: the baseline's inputs

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        if model.cfg.causal:
            raise ConfigError("pattern asymmetry needs a bidirectional (encoder) model.")
        norms = [attention_input_norm(model, layer) for layer in range(model.n_layers)]
        return {"heads_per_layer": list(model.heads_per_layer), "input_norms": norms}

    def settings(self) -> dict:
        return {
            "heads_per_layer": self.heads_per_layer, "factor": self.factor,
            "edge_level": self.edge_level, "baseline": self.baseline,
            "input_norms": [None if n is None else n.kind for n in self.input_norms],
        }

    def hook_names(self, model: HookedTransformer) -> list[str]:
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
        if self.baseline:
            names += [f"blocks.{i}.hook_resid_pre" for i in range(model.n_layers)]
        return names

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.attention_mask.device)
        mask = batch.attention_mask.bool()  # [batch, pos]
        self._lengths = mask.sum(-1)  # [batch]
        real = self._lengths > 0  # sentences with a token (the corpus refuses others)
        self._weights = real.to(torch.float64)  # [batch], the ratios' weights
        self._pairs = None  # [batch, pos, pos] real_pairs, made by the torch path alone
        self._mask = mask
        self.sentences += int(real.sum())  # one host read of the lengths per batch

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        # The C kernel (CPU) reads each layer's patterns where they lie, one call per layer
        # (holding them would first copy them, torch.cat); the baseline's inputs are held
        # (``_held_inputs``) and its attention computed for several layers at once (asym37).
        # The torch path holds both, then folds every held layer of the batch in one call
        # (``_fold_held``): the layers' heads side by side, entries outside each sentence's
        # real block 0 (masked_pattern_asymmetry), so no loop over layers, lengths or
        # sentences.
        held = self._inputs(layer, cache)
        if not kernel_available(held[0]):
            if self._held.add(layer, *held):
                self._fold_held()
            return
        self._fold_patterns([layer], held[0])
        if self.baseline and self._held_inputs.add(layer, held[1]):
            self._fold_held()

    def _inputs(self, layer: int, cache: ActivationCache) -> tuple[torch.Tensor, ...]:
        """The layer's patterns ``[batch, head, query_pos, key_pos]`` and, with the baseline,
        its attention's input ``[batch, 1, pos, d_model]``."""
        patterns = cache["pattern", layer]
        if not self.baseline:
            return (patterns,)
        X_all = cache["resid_pre", layer]  # [batch, pos, d_model]
        norm = self.input_norms[layer]
        if norm is not None:
            X_all = norm.to(X_all.device).apply(X_all)  # the attention's own input
        return patterns, X_all[:, None]

    def _fold_held(self) -> None:
        """Fold the held layers: patterns ``[batch, layer * head, pos, pos]`` (layer-major)
        and the baseline's inputs ``[batch, layer, pos, d_model]``."""
        for layers, held in self._held.take(dims=(1, 1)[: 1 + self.baseline]):
            self._fold_patterns(layers, held[0])
            if self.baseline:
                self._fold_baseline(layers, held[1])
        for layers, (X_all,) in self._held_inputs.take(dims=(1,)):
            self._fold_baseline(layers, X_all)

    def _fold_patterns(self, layers: list[int], patterns: torch.Tensor) -> None:
        n_layers = len(layers)
        ratio, counts = self._measures(patterns)
        add_to_layers(self.counts, layers, counts.sum(0).unflatten(0, (n_layers, -1)))
        if n_layers == 1:  # [batch, head]: the kernel's call per layer
            self.ratio_sum[layers[0], :ratio.shape[-1]] += self._weights @ ratio
            return
        # [batch, layer, head]; each layer's weighted sum over sentences as one product per
        # layer of a contiguous [batch, head] (the same product, and rounding, as unheld)
        ratio = ratio.unflatten(1, (n_layers, -1))
        for i, layer in enumerate(layers):
            self.ratio_sum[layer, :ratio.shape[-1]] += self._weights @ ratio[:, i].contiguous()

    def _fold_baseline(self, layers: list[int], X_all: torch.Tensor) -> None:
        real = self._weights  # [batch]
        alpha = masked_unweighted_attention(X_all, self._mask)  # [batch, layer, pos, pos]
        ratio, counts, violations = self._measures(alpha, violations=True)
        add_to_layers(self.base_counts, layers, counts.sum(0))
        ratio = ratio.mT.contiguous()  # [layer, batch]
        for i, layer in enumerate(layers):
            self.base_ratio_sum[layer] += real @ ratio[i]
        add_to_layers(self.base_violations, layers, violations.sum(0))

    def _measures(self, P: torch.Tensor, violations: bool = False) -> tuple[torch.Tensor, ...]:
        """Ratios ``[batch, matrix]``, counts ``[batch, matrix, 4]`` (and with ``violations``,
        ``[batch, matrix, 3]``) of ``P [batch, matrix, pos, pos]``: the C kernel on the CPU,
        the torch path elsewhere (the same counts; ratios within float32 rounding)."""
        if kernel_available(P):
            return kernel_pattern_asymmetry(P, self._mask, self.factor, self.edge_level,
                                            violations)
        lengths = self._lengths.clamp_min(1)
        if self._pairs is None:
            self._pairs = real_pairs(self._mask)
        measures = masked_pattern_asymmetry(P, self._pairs, lengths, self.factor,
                                            self.edge_level)
        if not violations:
            return measures
        return (*measures, masked_dominance_violations(P, self._pairs[:, None], lengths))

    def end_batch(self, batch: Batch) -> None:
        if self._held or self._held_inputs:
            self._fold_held()
        self._lengths = self._weights = self._pairs = self._mask = None

    @staticmethod
    def _graph_measures(ratio_sum, counts, sentences) -> list[np.ndarray]:
        def share(num, den):
            return torch.where(den > 0, num / den.clamp_min(1), torch.full_like(num, float("nan")))

        ratio = ratio_sum / max(sentences, 1)
        directed = share(counts[..., 3], counts[..., 2])
        reciprocity = share(counts[..., 1], counts[..., 0])
        return [m.cpu().numpy() for m in (ratio, directed, reciprocity)]

    def result(self) -> dict[str, pd.DataFrame]:
        if self.sentences == 0:
            raise ConfigError("the asymmetry analyzer saw no sentences; pass a non-empty corpus.")
        values = self._graph_measures(self.ratio_sum, self.counts, self.sentences)
        records = [
            {"layer": layer, "head": head, "measure": measure, "value": float(v[layer, head])}
            for measure, v in zip(PATTERN_MEASURES, values, strict=True)
            for layer, h in enumerate(self.heads_per_layer)
            for head in range(h)
        ]
        tables = {"pattern_asymmetry": pd.DataFrame.from_records(records)}
        if self.baseline:
            base = self._graph_measures(self.base_ratio_sum, self.base_counts, self.sentences)
            violations = self.base_violations.cpu()
            pairs = violations[:, 0].clamp_min(1)
            base += [(violations[:, 1] / pairs).numpy(), (violations[:, 2] / pairs).numpy()]
            tables["asymmetry_baseline"] = pd.DataFrame.from_records(
                {"layer": layer, "measure": measure, "value": float(v[layer])}
                for measure, v in zip(BASELINE_MEASURES, base, strict=True)
                for layer in range(self.n_layers)
            )
        return tables
