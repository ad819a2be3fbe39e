"""MultiHeadAttention: manual path = SDPA path = torch.nn.MultiheadAttention, and the seed forms."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlens.loaders.weights import heads_to_linear, heads_to_out_linear
from attnlens.model.attention import MultiHeadAttention

# fp32, absolute: outputs |y| <= ~4 are sums of <= 32 products computed by other kernels
# (manual, SDPA, torch MHA): eps 1.19e-7 x 4 x sqrt(32) ~ 3e-6 (measured <= 4.8e-7).
TOL = 1e-5


def make_attention(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(kwargs.pop("seed", 0))
    attn = MultiHeadAttention(**kwargs)
    with torch.no_grad():
        for p in (attn.b_Q, attn.b_K, attn.b_V, attn.b_O):
            if p is not None:
                p.normal_(std=0.1)
    return attn


def run_both_paths(attn: MultiHeadAttention, *args, **kwargs):
    attn.use_sdpa = True
    fast = attn(*args, **kwargs)
    attn.use_sdpa = False
    manual = attn(*args, **kwargs)
    attn.use_sdpa = True
    return manual, fast


def torch_mha(attn: MultiHeadAttention, kdim: int | None = None) -> torch.nn.MultiheadAttention:
    """torch.nn.MultiheadAttention carrying the same weights."""
    ref = torch.nn.MultiheadAttention(
        attn.d_in, attn.n_heads, bias=True, batch_first=True, kdim=kdim, vdim=kdim
    )
    with torch.no_grad():
        q, k, v = heads_to_linear(attn.W_Q), heads_to_linear(attn.W_K), heads_to_linear(attn.W_V)
        if kdim is None:
            ref.in_proj_weight.copy_(torch.cat([q, k, v]))
        else:
            ref.q_proj_weight.copy_(q)
            ref.k_proj_weight.copy_(k)
            ref.v_proj_weight.copy_(v)
        ref.in_proj_bias.copy_(
            torch.cat([attn.b_Q.flatten(), attn.b_K.flatten(), attn.b_V.flatten()])
        )
        ref.out_proj.weight.copy_(heads_to_out_linear(attn.W_O))
        ref.out_proj.bias.copy_(attn.b_O)
    return ref.eval()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_manual_sdpa_and_torch_agree(causal: bool, padded: bool) -> None:
    attn = make_attention(d_in=32, n_heads=4, causal=causal)
    x = torch.randn(3, 7, 32)
    padding = torch.ones(3, 7, dtype=torch.long)
    if padded:
        padding[1, 5:] = 0
        padding[2, 3:] = 0
    manual, fast = run_both_paths(attn, x, key_padding_mask=padding)
    ref = torch_mha(attn)
    causal_mask = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None
    expected, _ = ref(
        x, x, x, key_padding_mask=~padding.bool(), attn_mask=causal_mask, need_weights=False
    )
    assert (manual - fast).abs().max() <= TOL
    assert (manual - expected).abs().max() <= TOL


def test_cross_attention_matches_torch() -> None:
    attn = make_attention(d_in=24, n_heads=3, d_kv_in=10, d_head=8)
    x, memory = torch.randn(2, 5, 24), torch.randn(2, 9, 10)
    padding = torch.ones(2, 9)
    padding[0, 6:] = 0
    manual, fast = run_both_paths(attn, x, memory, key_padding_mask=padding)
    expected, _ = torch_mha(attn, kdim=10)(
        x, memory, memory, key_padding_mask=padding == 0, need_weights=False
    )
    assert (manual - fast).abs().max() <= TOL
    assert (manual - expected).abs().max() <= TOL


def test_grouped_query_attention_equals_repeated_heads() -> None:
    gqa = make_attention(d_in=32, n_heads=4, n_kv_heads=2, causal=True)
    mha = MultiHeadAttention(d_in=32, n_heads=4, causal=True)
    with torch.no_grad():
        mha.W_Q.copy_(gqa.W_Q)
        mha.b_Q.copy_(gqa.b_Q)
        for name in ("W_K", "W_V", "b_K", "b_V"):
            getattr(mha, name).copy_(getattr(gqa, name).repeat_interleave(2, dim=0))
        mha.W_O.copy_(gqa.W_O)
        mha.b_O.copy_(gqa.b_O)
    x = torch.randn(2, 6, 32)
    manual, fast = run_both_paths(gqa, x)
    expected = mha(x)
    assert (manual - fast).abs().max() <= TOL
    assert (manual - expected).abs().max() <= TOL
    # And against torch.nn.MultiheadAttention through the repeated-head model.
    ref = torch_mha(mha)
    mask = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (manual - ref(x, x, x, attn_mask=mask, need_weights=False)[0]).abs().max() <= TOL


def test_additive_bias_shifts_attention() -> None:
    attn = make_attention(d_in=16, n_heads=2)
    x = torch.randn(1, 5, 16)
    bias = torch.zeros(1, 2, 5, 5)
    bias[..., 0] = 50.0  # every query looks at token 0 almost only
    _, cache = capture(attn, x, attn_bias=bias)
    assert cache["pattern"][..., 0].min() > 0.99  # a +50 logit leaves ~4 e^-50 elsewhere
    manual, fast = run_both_paths(attn, x, attn_bias=bias)
    assert (manual - fast).abs().max() <= TOL


def capture(attn: MultiHeadAttention, *args, **kwargs):
    store = {}

    def keep(name):
        def fn(t, hook):
            store[name] = t.detach().clone()

        return fn

    handles = [
        getattr(attn, f"hook_{n}").add_hook(keep(n))
        for n in ("q", "k", "v", "scores", "pattern", "z")
    ]
    out = attn(*args, **kwargs)
    for remove in handles:
        remove()
    return out, store


def test_per_query_loop_of_the_seeds_equals_matrix_form() -> None:
    attn = make_attention(d_in=12, n_heads=3)
    x = torch.randn(1, 6, 12)
    out, cache = capture(attn, x)
    q, k, v = cache["q"][0], cache["k"][0], cache["v"][0]  # [pos, head, d_head]
    z = torch.zeros_like(cache["z"][0])  # [pos, head, d_head_v]
    for h in range(3):
        for i in range(6):
            logits = torch.stack([q[i, h] @ k[j, h] / math.sqrt(attn.d_head) for j in range(6)])
            weights = torch.exp(logits - logits.max())
            weights = weights / weights.sum()
            z[i, h] = sum(weights[j] * v[j, h] for j in range(6))
    assert (z - cache["z"][0]).abs().max() <= TOL
    looped = torch.einsum("phv,hvo->po", z, attn.W_O) + attn.b_O
    assert (looped - out[0]).abs().max() <= TOL


def test_patterns_and_messages_form_equals_standard_form() -> None:
    """sum_h softmax(X W_P,h X^T / sqrt(d_head)) X W_M,h == the W_Q/W_K/W_V/W_O form."""
    attn = MultiHeadAttention(d_in=16, n_heads=4, qkv_bias=False, out_bias=False)
    x = torch.randn(5, 16)
    W_P, W_M = attn.QK.AB, attn.OV.AB  # [head, d_in, d_in], [head, d_in, d_out]
    seed_form = sum(
        torch.softmax(x @ W_P[h] @ x.T / math.sqrt(attn.d_head), dim=-1) @ x @ W_M[h]
        for h in range(4)
    )
    assert (seed_form - attn(x[None])[0]).abs().max() <= TOL


def test_without_output_projection_heads_are_concatenated() -> None:
    attn = make_attention(d_in=12, n_heads=3, d_out=9, use_out_proj=False)
    x = torch.randn(2, 4, 12)
    out, cache = capture(attn, x)
    assert out.shape == (2, 4, 9)
    assert torch.equal(out, cache["z"].reshape(2, 4, 9))
    manual, fast = run_both_paths(attn, x)
    assert (manual - fast).abs().max() <= TOL


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 8),
    c=st.integers(1, 8),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.1, 5.0),
)
def test_unweighted_self_attention_is_diagonally_dominant(n, c, seed, scale) -> None:
    """softmax(X X^T / sqrt(C)) has symmetric logits dominated by the diagonal.

    Cauchy-Schwarz gives s_ij <= |x_i| |x_j| <= max(s_ii, s_jj) for the logits, hence in
    probabilities alpha_ij <= alpha_ii for every i whose |x_i| >= |x_j| (same row, same
    normaliser). The seed texts state alpha_ij <= max(alpha_ii, alpha_jj) for the
    probabilities; that is false in general (see the counter-example test below).
    """
    x = torch.randn(n, c, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    logits = scale * x @ x.T / math.sqrt(c)
    # float64: s_ij and s_ji may be summed in other orders; |s| <= ~50, c <= 8 terms:
    # 2.2e-16 x 50 x 8 ~ 1e-13 (measured <= 7.1e-15). The same 1e-12 slack below.
    assert torch.allclose(logits, logits.T, rtol=0, atol=1e-12)
    diag = logits.diagonal()
    assert (logits <= torch.maximum(diag[:, None], diag[None, :]) + 1e-12).all()
    alpha = torch.softmax(logits, dim=-1)
    norms = x.norm(dim=-1)
    row_dominates = norms[:, None] >= norms[None, :]  # [i, j]: |x_i| >= |x_j|
    assert (alpha <= alpha.diagonal()[:, None] + 1e-12)[row_dominates].all()  # float64, alpha <= 1


def test_probability_form_of_diagonal_dominance_has_counterexamples() -> None:
    """Row normalisers differ, so alpha_ij <= max(alpha_ii, alpha_jj) can fail."""
    x = torch.tensor([[0.6614], [0.2669], [0.0617]], dtype=torch.float64)
    alpha = torch.softmax(x @ x.T, dim=-1)
    assert alpha[2, 1] > max(alpha[2, 2], alpha[1, 1])


def test_a_weighted_head_violates_diagonal_dominance() -> None:
    # W_Q W_K^T maps token 0 onto token 1: it prefers the other token to itself.
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    W_QK = torch.tensor([[0.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    logits = x @ W_QK @ x.T
    assert logits[0, 1] > max(logits[0, 0], logits[1, 1])
    alpha = torch.softmax(logits, dim=-1)
    diag = alpha.diagonal()
    assert alpha[0, 1] > max(diag[0], diag[1])


def test_rotary_scores_depend_only_on_relative_position() -> None:
    attn = make_attention(d_in=16, n_heads=2, rotary_dim=8, qkv_bias=False)
    token = torch.randn(1, 1, 16)
    other = torch.randn(1, 1, 16)
    x = torch.cat([token, other], dim=1)

    def scores_at(positions):
        _, cache = capture(attn, x, positions=torch.tensor([positions]))
        return cache["scores"][0, :, 0, 1]  # query token 0 -> key token 1, per head

    base = scores_at([3, 7])
    # fp32 angles p x theta up to 107 rad carry ~107 x 1.19e-7 = 1.3e-5 rad of rounding; times
    # |q||k| <= ~5 -> 1e-4 (measured 3.6e-7). A different offset moves scores by O(1) (2.0).
    assert (scores_at([13, 17]) - base).abs().max() <= 1e-4  # same offset
    assert (scores_at([103, 107]) - base).abs().max() <= 1e-4
    assert (scores_at([3, 9]) - base).abs().max() > 1e-3  # a different offset changes it


def test_partial_rotary_leaves_other_features_alone() -> None:
    attn = make_attention(d_in=16, n_heads=2, rotary_dim=4, qkv_bias=False)
    x = torch.randn(1, 3, 16)
    _, moved = capture(attn, x, positions=torch.tensor([[0, 5, 9]]))
    _, still = capture(attn, x, positions=torch.tensor([[0, 0, 0]]))
    assert torch.equal(moved["q"][..., 4:], still["q"][..., 4:])
    # rotated features move by O(1) (measured 2.1), far outside allclose's rtol 1e-5/atol 1e-8
    assert not torch.allclose(moved["q"][:, 1:, :, :4], still["q"][:, 1:, :, :4])


def test_head_gate_zero_removes_exactly_that_head() -> None:
    attn = make_attention(d_in=16, n_heads=4)
    x = torch.randn(2, 5, 16)
    _, cache = capture(attn, x)
    gate = torch.ones(4)
    gate[2] = 0.0
    gated = attn(x, head_gate=gate)
    contribution = torch.einsum("bpv,vo->bpo", cache["z"][:, :, 2], attn.W_O[2])
    assert (attn(x) - contribution - gated).abs().max() <= TOL
    assert (gated - attn(x)).abs().max() > 1e-3  # must differ: the head writes O(1) (1.05)


def test_head_gate_gradient_matches_finite_differences() -> None:
    attn = make_attention(d_in=8, n_heads=2).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    target = torch.randn(2, 4, 8, dtype=torch.float64)

    def loss(gate):
        return ((attn(x, head_gate=gate) - target) ** 2).sum()

    gate = torch.ones(2, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(gate), gate)
    eps = 1e-6
    for h in range(2):
        step = torch.zeros(2, dtype=torch.float64)
        step[h] = eps
        numeric = (loss(gate.detach() + step) - loss(gate.detach() - step)) / (2 * eps)
        # float64 central difference: rounding 2.2e-16 x |loss| (~64) / 1e-6 ~ 1.4e-8, truncation
        # eps^2 f''' ~ 1e-12: 1e-6 relative leaves room (measured 4.2e-9).
        assert abs(grad[h].item() - numeric.item()) <= 1e-6 * max(1.0, abs(numeric.item()))


def test_bfloat16_forward_is_close_to_float32() -> None:
    attn = make_attention(d_in=32, n_heads=4)
    x = torch.randn(2, 6, 32)
    expected = attn(x)
    low = attn.to(torch.bfloat16)(x.to(torch.bfloat16)).float()
    # bf16 keeps 8 bits of mantissa: relative error ~ 2^-8 per op; 5e-2 absolute on O(1) outputs
    # (measured 9.4e-3).
    assert (low - expected).abs().max() <= 5e-2


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        )
    ],
)
def test_cuda_paths_agree_with_cpu(device: str) -> None:
    attn = make_attention(d_in=32, n_heads=4, causal=True)
    x = torch.randn(2, 6, 32)
    expected = attn(x)
    gpu = attn.to(device)
    manual, fast = run_both_paths(gpu, x.to(device))
    # fp32 on the GPU (TF32 off, torch's default for matmul): other reduction orders on |y| <= 4,
    # 3e-6 as for TOL, x30 for GPU kernels -> 1e-4 (measured <= 9.5e-7 on an H100).
    assert (manual.cpu() - expected).abs().max() <= 1e-4
    assert (fast.cpu() - expected).abs().max() <= 1e-4


def test_factored_singular_values_match_the_full_product() -> None:
    attn = make_attention(d_in=20, n_heads=4, d_head=3)
    for factored in (attn.QK, attn.OV):
        full = torch.linalg.svdvals(factored.AB.double())[..., : factored.inner_dim]
        # svdvals are float64 rounded to fp32: 0.5 ulp of s <= 2 is 1.2e-7 (measured <= 9e-8)
        assert (factored.svdvals().double() - full).abs().max() <= 1e-5
        assert factored.shape == tuple(factored.AB.shape)
    # rank d_head: the 3 singular values are O(1) (min 0.5); a lost rank gives ~1e-16 s_1
    assert (attn.QK.svdvals() > 1e-6).sum(-1).tolist() == [3, 3, 3, 3]


def test_softmax_rows_are_distributions_and_padding_gets_no_weight() -> None:
    attn = make_attention(d_in=16, n_heads=2, causal=True)
    padding = torch.tensor([[1, 1, 1, 0, 0]])
    _, cache = capture(attn, torch.randn(1, 5, 16), key_padding_mask=padding)
    pattern = cache["pattern"]
    # rows of <= 5 fp32 probabilities sum to 1 within ~5 x 1.19e-7 (allclose rtol 1e-5)
    assert torch.allclose(pattern.sum(-1), torch.ones(1, 2, 5))
    assert pattern[..., 3:].max() == 0.0
    assert pattern[0, :, 0, 1:].max() == 0.0  # causal: the first token sees only itself


def test_dimension_errors_are_config_errors() -> None:
    from attnlens.errors import ConfigError

    with pytest.raises(ConfigError):
        MultiHeadAttention(d_in=16, n_heads=4, n_kv_heads=3)
    with pytest.raises(ConfigError):
        MultiHeadAttention(d_in=16, n_heads=4, d_out=10, use_out_proj=False)
    with pytest.raises(ConfigError):
        MultiHeadAttention(d_in=16, n_heads=4, rotary_dim=5)


def test_sdpa_is_the_default_path_and_hooks_switch_to_manual() -> None:
    attn = make_attention(d_in=16, n_heads=2)
    calls = []
    original = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    F_module = __import__("attnlens.model.attention", fromlist=["F"]).F
    F_module.scaled_dot_product_attention = spy
    try:
        x = torch.randn(1, 3, 16)
        attn(x)
        assert len(calls) == 1
        remove = attn.hook_pattern.add_hook(lambda t, hook: None)
        attn(x)
        remove()
        assert len(calls) == 1  # the pattern hook forced the manual path
    finally:
        F_module.scaled_dot_product_attention = original
