"""The fast-weight / linear-attention view on hand-built heads whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.linear.linear_attention import (
    LinearAttentionView,
    key_geometry,
    linear_outputs,
    per_query_head,
)
from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

# Cosines, participation ratios and relative errors of float32 tensors with n, d <= 16:
# each is a handful of float32 dot products of length <= 16 (relative error <= 16 * 1.2e-7),
# so 1e-5 bounds them.
TOL = 1e-5


def _cache(q, k, v, p) -> ActivationCache:
    """One layer: ``q [batch, pos, head, d]``, ``k``/``v [batch, pos, kv_head, d]``,
    ``p [batch, head, q, k]``."""
    return ActivationCache({"blocks.0.attn.hook_q": q, "blocks.0.attn.hook_k": k,
                            "blocks.0.attn.hook_v": v, "blocks.0.attn.hook_pattern": p})


def _measures(view: LinearAttentionView) -> dict[tuple[str, int], float]:
    table = view.result()["linear_attention"]
    return {(r.measure, r.head): r.value for r in table.itertuples()}


def _batch(n: int, batch: int = 1) -> Batch:
    ids = torch.arange(5, 5 + n).expand(batch, n)
    return Batch(input_ids=ids, attention_mask=torch.ones_like(ids))


def test_one_hot_attention_to_orthogonal_keys_retrieves_values_exactly():
    n, d = 6, 8
    keys = torch.eye(d)[:n]  # orthonormal keys k_i = e_i
    q = k = keys[None, :, None, :]  # [batch, pos, head, d]: each query is its own key
    v = torch.randn(1, n, 1, 4)
    p = torch.eye(n)[None, None]  # one-hot: query i reads key i
    view = LinearAttentionView(1, 1, d)
    view.update(_batch(n), _cache(q, k, v, p))
    m = _measures(view)
    assert m["interference", 0] == 0.0  # cosines of distinct orthonormal keys are exactly 0
    assert m["effective_keys", 0] == pytest.approx(n, abs=TOL)  # n orthogonal keys
    assert m["effective_keys_frac", 0] == pytest.approx(1.0, abs=TOL)
    # the fast-weight read-out Σ_j (k_j · q_i) v_j = v_i: exact, with and without the gain
    assert m["raw_error", 0] == pytest.approx(0.0, abs=TOL)
    assert m["raw_error_rescaled", 0] == pytest.approx(0.0, abs=TOL)
    assert m["length", 0] == n


def test_parallel_keys_interfere_fully_and_count_as_one():
    keys = torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [-0.5, -1.0, 0.0]])
    interference, effective = key_geometry(keys[None, None], torch.ones(1, 3, dtype=torch.bool))
    assert interference.item() == pytest.approx(1.0, abs=TOL)
    assert effective.item() == pytest.approx(1.0, abs=TOL)


def _softmax_head(q, k):
    d = q.shape[-1]
    scores = q.transpose(1, 2) @ k.transpose(1, 2).mT / math.sqrt(d)
    return torch.softmax(scores, -1)  # [batch, head, query, key]


def test_near_uniform_heads_linearise_well_and_sharp_heads_do_not():
    torch.manual_seed(3)
    n, d = 12, 16
    base_q, base_k = torch.randn(1, n, 1, d), torch.randn(1, n, 1, d)
    v = torch.randn(1, n, 1, 8) + 1.0
    errors = {}
    for name, gain in (("uniform", 1e-3), ("sharp", 8.0)):
        q, k = base_q * gain, base_k * gain
        view = LinearAttentionView(1, 1, d)
        view.update(_batch(n), _cache(q, k, v, _softmax_head(q, k)))
        errors[name] = _measures(view)["linear_error", 0]
    # Tiny scores: the softmax weights are uniform up to O(gain^2); the elu+1 weights are
    # proportional to d + Σ_m k_jm + O(gain^2) (the query's own sum is the same for every key
    # and cancels), uniform up to gain * |Σ_m k_jm| / d ~ 1e-3 * 4 / 16. So the outputs agree
    # to well under 1e-2 (measured 6.9e-5). Sharp scores: the softmax is nearly one-hot while
    # the elu+1 weights stay spread, so the outputs differ by O(1) (measured 0.64).
    assert errors["uniform"] < 1e-2
    assert errors["sharp"] > 0.3
    assert errors["sharp"] > 20 * errors["uniform"]


@pytest.mark.parametrize("causal", [True, False])
def test_linear_outputs_follow_the_formula(causal):
    torch.manual_seed(4)
    n = 5
    q, k, v = torch.randn(1, 1, n, 3), torch.randn(1, 1, n, 3), torch.randn(1, 1, n, 2)
    real = torch.tensor([[True, True, True, True, False]])  # the last key is padding
    lin, raw = linear_outputs(q, k, v, real, causal)
    phi_q, phi_k = F.elu(q[0, 0]) + 1, F.elu(k[0, 0]) + 1
    for i in range(n - 1):
        seen = range(i + 1) if causal else range(n - 1)
        weights = torch.stack([phi_q[i] @ phi_k[j] for j in seen])
        expected = (weights[:, None] * v[0, 0, list(seen)]).sum(0) / weights.sum()
        torch.testing.assert_close(lin[0, 0, i], expected, rtol=0, atol=TOL)
        expected_raw = sum((q[0, 0, i] @ k[0, 0, j]) * v[0, 0, j] for j in seen)
        torch.testing.assert_close(raw[0, 0, i], expected_raw, rtol=0, atol=TOL)
    if causal:  # query 0 sees key 0 only: the linear attention returns v_0
        torch.testing.assert_close(lin[0, 0, 0], v[0, 0, 0], rtol=0, atol=TOL)


def test_grouped_query_heads_read_their_kv_head():
    x = torch.arange(2 * 3 * 2 * 4, dtype=torch.float32).reshape(2, 3, 2, 4)  # 2 kv heads
    heads = per_query_head(x, 6)  # [batch, head, pos, d]
    assert heads.shape == (2, 6, 3, 4)
    for h in range(6):
        assert torch.equal(heads[:, h], x[:, :, h // 3])


def test_padding_is_excluded_merge_of_halves_equals_the_whole_and_state_round_trips():
    torch.manual_seed(5)
    n, d = 6, 4
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    q, k, v = torch.randn(2, n, 2, d), torch.randn(2, n, 2, d), torch.randn(2, n, 2, 3)
    scores = (q.transpose(1, 2) @ k.transpose(1, 2).mT).masked_fill(
        ~mask.bool()[:, None, None, :], -torch.inf)
    p = torch.softmax(scores, -1)
    ids = torch.arange(n).expand(2, n)
    whole = LinearAttentionView(1, 2, d)
    whole.update(Batch(input_ids=ids, attention_mask=mask), _cache(q, k, v, p))
    halves = []
    for b in (0, 1):
        n_b = int(mask[b].sum())  # the second sentence without its padding
        part = LinearAttentionView(1, 2, d)
        part.update(Batch(input_ids=ids[b : b + 1, :n_b], attention_mask=mask[b : b + 1, :n_b]),
                    _cache(q[b : b + 1, :n_b], k[b : b + 1, :n_b], v[b : b + 1, :n_b],
                           p[b : b + 1, :, :n_b, :n_b]))
        halves.append(part)
    merged = halves[0].merge(halves[1])
    # per-sentence float32 terms from differently padded tensors: relative rounding TOL
    torch.testing.assert_close(merged.sums, whole.sums, rtol=TOL, atol=TOL)
    assert merged.sentences == 2 and torch.equal(merged.length_counts, whole.length_counts)
    restored = LinearAttentionView(1, 2, d)
    restored.load_state_dict(whole.state_dict())
    assert restored.result()["linear_attention"].equals(whole.result()["linear_attention"])
    by_length = whole.result()["linear_keys_by_length"]
    assert set(by_length["lengths"]) == {"1-8"} and set(by_length["sentences"]) == {2}
    with pytest.raises(ConfigError, match="causal"):
        whole.merge(LinearAttentionView(1, 2, d, causal=True))


def test_rotary_grouped_causal_model_uses_post_rotary_queries_and_keys():
    # A tiny causal model with rotary embeddings and 2 kv heads for 4 query heads: the
    # analyzer's raw scores q k^T (from hook_q / hook_k) scaled by 1/sqrt(d) must reproduce
    # the model's own pattern, which holds only for post-rotary q and k.
    model = tiny_model(causal=True, positional="rotary", rotary_dim=4, n_kv_heads=2,
                       n_token_types=0, embed_norm=False)
    ids = torch.randint(1, 50, (2, 7))
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids))
    _, cache = model.run_with_cache(ids, names_filter=lambda name: "attn.hook_" in name)
    attn = model.blocks[0].attn
    q = per_query_head(cache["q", 0], 4)
    k = per_query_head(cache["k", 0], 4)
    scores = (q @ k.mT * attn.scale).masked_fill(torch.ones(7, 7).triu(1).bool(), -torch.inf)
    torch.testing.assert_close(torch.softmax(scores, -1), cache["pattern", 0], rtol=0, atol=TOL)
    (view,) = run_analyzers(model, [batch], [LinearAttentionView.for_model(model)],
                            show_progress=False)
    direct = LinearAttentionView.for_model(model)
    direct.update(batch, cache)
    torch.testing.assert_close(view.sums, direct.sums, rtol=TOL, atol=TOL)
    assert view.causal and torch.isfinite(view.sums).all()


def test_shared_norm_errors_equal_the_functions_bitwise():
    """matrix30: the analyzer computes ``||O||`` once and reuses it for its three errors; the
    numbers must be those of ``relative_error`` and ``rescaled_error`` exactly, and those of
    their definition (padded query rows weighted 0) up to float32 rounding."""
    from attnlens.measures.linear.linear_attention import (
        _error_over,
        _rescaled_over,
        _weighted_norm,
        relative_error,
        rescaled_error,
    )

    gen = torch.Generator().manual_seed(9)
    exact, lin, raw = (torch.randn(3, 4, 7, 5, generator=gen) for _ in range(3))
    rows = torch.arange(7)[None, :] < torch.tensor([7, 4, 1])[:, None]
    weight = rows[:, None, :, None].float()
    norm = _weighted_norm(exact, weight)
    assert torch.equal(_error_over(lin, exact, weight, norm), relative_error(lin, exact, rows))
    assert torch.equal(_rescaled_over(raw, exact, weight, norm), rescaled_error(raw, exact, rows))
    for b, n in enumerate((7, 4, 1)):
        e, a = exact[b, :, :n].double(), raw[b, :, :n].double()
        gain = (a * e).sum((-2, -1)) / (a * a).sum((-2, -1))
        want = (gain[:, None, None] * a - e).norm(dim=(-2, -1)) / e.norm(dim=(-2, -1))
        # float32 sums of n * d = 35 products against float64: ~35 * 6e-8 relative
        torch.testing.assert_close(rescaled_error(raw, exact, rows)[b].double(), want,
                                   rtol=1e-5, atol=1e-7)
