"""Spectrum analyzer: hand-built matrices, an independent float64 reference, streaming."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.spectrum.spectrum import (
    SpectrumAnalyzer,
    cumulative_curve,
    curve_at,
    entropy_effective_rank,
    gather_square,
    length_groups,
    linformer_rms_error,
    numerical_rank,
    rank_ks,
    singular_values,
    truncation_errors,
)
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers
from tests.fixtures import tiny_batches


def random_patterns(batch: int, n: int, seed: int = 0, sharpness: float = 3.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(sharpness * torch.randn(batch, n, n, generator=gen), dim=-1)


# --- hand-built matrices -----------------------------------------------------------------
@pytest.mark.parametrize("method", ["auto", "gram64", "svd32", "gram32", "svdvals"])
def test_rank_two_matrix_has_two_nonzero_singular_values(method):
    u = torch.tensor([[1.0, 0, 0, 0, 0], [0, 1.0, 0, 0, 0]]).T  # [5, 2]
    v = torch.tensor([[0.5, 0.5, 0, 0, 0], [0, 0, 1.0, 0, 0]])  # [2, 5]
    P = (u @ v)[None]  # rows 0 and 1 non-zero, rank 2
    s = singular_values(P, method)[0]
    expected = sorted(np.linalg.svd((u @ v).double().numpy(), compute_uv=False), reverse=True)
    # s_1 = 1, s_2 = 0.71 from float32 solvers against numpy's float64: svd32 errs by up to
    # n x 1.19e-7 s_1 = 6e-7, gram32 by n x 1.19e-7 s_1^2 / (2 s) = 4e-7, at 1e-6 with no
    # room for LAPACK's constant -> 1e-5 (measured 7.2e-8 on every kernel set tried)
    assert s[:2].numpy() == pytest.approx(expected[:2], abs=1e-5)
    # zero singular values: sqrt of eigenvalue rounding for the Gram methods, sqrt(n x 1.19e-7)
    # s_1 = 8e-4 for gram32 and 3e-8 for gram64; up to n x 1.19e-7 s_1 = 6e-7 for svd32, above
    # the former 1e-7 -> 1e-6 (measured exactly 0.0: the entries are exact in binary)
    tol = 1e-3 if method == "gram32" else 1e-6
    assert s[2:].abs().max() < tol
    # three tail values below tol against sum s = 1.71: the curve is within 3 tol / 1.71 of 1
    # (it was 1e-6 for every method, tighter than gram32's own tol)
    assert cumulative_curve(s)[1] == pytest.approx(1.0, abs=3 * tol)


def test_identity_attention_has_flat_spectrum():
    n = 8
    s = singular_values(torch.eye(n)[None])[0]  # float64 Gram of the identity: exact below
    curve = cumulative_curve(s)
    assert s.numpy() == pytest.approx(np.ones(n))
    assert curve.numpy() == pytest.approx(np.arange(1, n + 1) / n)
    assert float(entropy_effective_rank(s)) == pytest.approx(n)
    assert float(numerical_rank(curve, 0.9)) == math.ceil(0.9 * n)  # 7.2 -> 8
    assert float(numerical_rank(curve, 0.99)) == n
    assert float(curve_at(curve, torch.tensor([n / 4]))[0]) == pytest.approx(0.25)


def test_all_attend_to_first_token_is_rank_one():
    n = 6
    P = torch.zeros(1, n, n)
    P[..., 0] = 1.0
    s = singular_values(P)[0]  # auto: float64 Gram
    assert float(s[0]) == pytest.approx(math.sqrt(n))  # float64, exact here (measured 0.0)
    curve = cumulative_curve(s)
    # P P^T is all ones: its 5 zero eigenvalues come out as ~n x 2.2e-16 s_1^2, so the tail
    # singular values as up to sqrt(6 x 2.2e-16) s_1 = 3.6e-8 s_1 each (measured one of
    # 2.2e-8). The curve's deficit, sum tail / sum s, can reach 5 x 3.6e-8 = 1.8e-7: above
    # the former 1e-7 -> 1e-6. The effective rank gains -p log p ~ 6e-7 per tail value, up to
    # 3e-6: above the former 1e-6 -> 1e-5 (measured 8.8e-9 and 1.7e-7). A float32 Gram gives
    # tails of ~8e-4 s_1 and fails both.
    assert float(curve[0]) == pytest.approx(1.0, abs=1e-6)
    assert float(entropy_effective_rank(s)) == pytest.approx(1.0, abs=1e-5)
    assert float(numerical_rank(curve, 0.99)) == 1


def test_curve_interpolates_linearly_between_integers():
    curve = torch.tensor([[0.5, 0.75, 0.9, 1.0]], dtype=torch.float64)
    x = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.25, 4.0], dtype=torch.float64)
    got = curve_at(curve, x)[0].numpy()
    assert got == pytest.approx([0.0, 0.25, 0.5, 0.625, 0.75 + 0.25 * 0.15, 1.0])  # float64


def test_rank_ks_rounds_up_and_stays_in_range():
    assert rank_ks(10, (0.125, 0.25, 0.5, 1.0)) == [2, 3, 5, 10]
    assert rank_ks(1, (0.1,)) == [1]
    assert rank_ks(8, (0.25,)) == [2]


@pytest.mark.parametrize("n", [20, 40])
@pytest.mark.parametrize("method", ["auto", "gram64", "svd32"])
def test_fast_methods_agree_with_float64_svd(method, n):
    P = random_patterns(64, n)
    ref = torch.linalg.svdvals(P.double())
    got = singular_values(P, method)
    assert got.dtype == torch.float64
    # svd32: fp32 SVD errs by ~n x 1.19e-7 s_1 = 4.8e-6 s_1 at worst for n = 40 (measured
    # 5.2e-7 s_1); gram64/auto are float64.
    assert (got - ref).abs().max() < 1e-5 * float(ref[:, 0].max())
    # The curve moves by sum |ds| / sum s <= n x c x 1.19e-7 x s_1 / sum s ~ 5e-7 c, c being
    # LAPACK's small constant: 1e-6 left no room for c -> 5e-6 (measured 7.7e-8), which still
    # fails the float32 Gram (gram32: 8.4e-6 at n = 40, 3.4e-5 at n = 20).
    assert (cumulative_curve(got) - cumulative_curve(ref)).abs().max() < 5e-6
    # The effective rank (<= n = 40) moves by erank x sum |dp| |log p| ~ 1.5e-4 if every
    # rounding of svd32 added up, ~2.4e-5 as a random walk: 1e-5 was below that -> 1e-4
    # (measured 2.1e-6); gram32 errs by 2e-3 to 4e-3.
    assert (entropy_effective_rank(got) - entropy_effective_rank(ref)).abs().max() < 1e-4


def test_unknown_method_is_a_config_error():
    with pytest.raises(ConfigError, match="method"):
        singular_values(torch.eye(3)[None], "qr")
    with pytest.raises(ConfigError, match="fractions"):
        SpectrumAnalyzer([2], rank_fractions=(0.0,))


# --- low-rank costs against explicit constructions -------------------------------------
def test_truncation_errors_match_explicit_rank_k_approximations():
    P = random_patterns(3, 12, seed=1)
    gen = torch.Generator().manual_seed(2)
    V = torch.randn(3, 12, 5, generator=gen)
    ks = [1, 3, 6, 12]
    s, p_err, out_err = truncation_errors(P, V, ks)
    for b in range(3):
        Pn, Vn = P[b].double().numpy(), V[b].double().numpy()
        U, S, Wt = np.linalg.svd(Pn)
        # float64 throughout (truncation_errors casts): ~1e-15 (measured <= 8.8e-14)
        assert s[b].numpy() == pytest.approx(S, abs=1e-9)
        for j, k in enumerate(ks):
            Pk = (U[:, :k] * S[:k]) @ Wt[:k]
            expected_p = np.linalg.norm(Pn - Pk) / np.linalg.norm(Pn)
            expected_out = np.linalg.norm((Pn - Pk) @ Vn) / np.linalg.norm(Pn @ Vn)
            assert float(p_err[b, j]) == pytest.approx(expected_p, abs=1e-7)
            assert float(out_err[b, j]) == pytest.approx(expected_out, abs=1e-7)
    assert p_err[:, -1].abs().max() < 1e-6  # full rank: no error (float64; measured 0.0)


def test_linformer_rms_error_matches_monte_carlo_draws():
    """The closed form against the mean over explicit Gaussian projections E [k, n]."""
    gen = torch.Generator().manual_seed(3)
    n, d, k, draws = 10, 4, 3, 20000
    P = torch.softmax(2 * torch.randn(n, n, generator=gen, dtype=torch.float64), dim=-1)
    V = torch.randn(n, d, generator=gen, dtype=torch.float64)
    exact = P @ V
    E = torch.randn(draws, k, n, generator=gen, dtype=torch.float64) / math.sqrt(k)
    approx = P @ E.mT @ E @ V  # [draws, n, d]: P E^T E V
    rel_sq = ((approx - exact) ** 2).sum(dim=(-2, -1)) / (exact**2).sum()  # [draws]
    # Unbiased: the mean of P E^T E V is P V (mean error within 5 standard errors).
    mean_err = (approx.mean(0) - exact).abs().max()
    assert mean_err < 5 * float(approx.std(0).max()) / math.sqrt(draws)
    # Mean square: within 5 standard errors of the Monte Carlo mean of rel_sq.
    got = float(linformer_rms_error(P, V, [k])[0]) ** 2
    assert abs(got - float(rel_sq.mean())) < 5 * float(rel_sq.std()) / math.sqrt(draws)


def test_linformer_rms_error_on_hand_built_heads():
    n, d = 6, 3
    V = torch.arange(1.0, n * d + 1, dtype=torch.float64).reshape(n, d)
    # Identity attention: ||P||_F^2 = n and ||P V|| = ||V||, so the error is sqrt((1 + n) / k).
    got = linformer_rms_error(torch.eye(n, dtype=torch.float64), V, [1, 2, 6])
    # float64 norms of 18 values: pytest.approx's default rel 1e-6 is far above 2.2e-16 x 18
    assert got.numpy() == pytest.approx(np.sqrt((1 + n) / np.array([1, 2, 6])))
    # Everyone attends to token 0: ||P||_F^2 = n, ||P V||^2 = n ||v_0||^2.
    P = torch.zeros(n, n, dtype=torch.float64)
    P[:, 0] = 1
    rho = float((V**2).sum() / (V[0] ** 2).sum())
    # float64 norms as above (default rel 1e-6 >> float64 rounding)
    assert float(linformer_rms_error(P, V, [2])[0]) == pytest.approx(math.sqrt((1 + rho) / 2))
    # Never below sqrt(2 / k): ||P||_F ||V||_F >= ||P V||_F.
    rand = random_patterns(5, n, seed=4).double()
    # 1e-12: float64 norms of 36 products (~36 x 2.2e-16 relative on values of order 1)
    assert (linformer_rms_error(rand, V.expand(5, n, d), [3]) >= math.sqrt(2 / 3) - 1e-12).all()


# --- real-token extraction ---------------------------------------------------------------
def test_length_groups_handle_right_and_left_padding():
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    groups = {g.n: g for g in length_groups(mask)}
    assert sorted(groups) == [2, 3]  # the empty row is skipped
    assert groups[3].rows.tolist() == [0, 1]
    assert groups[3].positions.tolist() == [[0, 1, 2], [1, 2, 3]]
    x = torch.arange(4 * 1 * 4 * 4, dtype=torch.float32).reshape(4, 1, 4, 4)
    block = gather_square(x, groups[3])  # [2, 1, 3, 3]
    assert torch.equal(block[0, 0], x[0, 0, :3, :3])
    assert torch.equal(block[1, 0], x[1, 0, 1:, 1:])


# --- streaming on a tiny random model ----------------------------------------------------
def make_batches(lengths: list[list[int]], seed: int = 0) -> list[Batch]:
    return tiny_batches(lengths, seed)


def all_at_once(batches: list[Batch]) -> Batch:
    """The same sentences in one batch (padded to the longest)."""
    width = max(b.input_ids.shape[1] for b in batches)
    pad = [torch.nn.functional.pad(b.input_ids, (0, width - b.input_ids.shape[1])) for b in batches]
    masks = [
        torch.nn.functional.pad(b.attention_mask, (0, width - b.input_ids.shape[1]))
        for b in batches
    ]
    return Batch(input_ids=torch.cat(pad), attention_mask=torch.cat(masks))


def assert_tables_close(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        left, right = a[name], b[name]
        assert list(left.columns) == list(right.columns), name
        assert len(left) == len(right), name
        np.testing.assert_allclose(
            left["value"].to_numpy(), right["value"].to_numpy(), atol=atol, err_msg=name
        )


LENGTHS = [[5, 7, 7], [3, 12], [9, 9, 4, 20]]


def test_streamed_average_equals_all_at_once(tiny_gqa):
    batches = make_batches(LENGTHS)
    streamed = SpectrumAnalyzer.for_model(tiny_gqa)
    run_analyzers(tiny_gqa, batches, [streamed], show_progress=False)
    once = SpectrumAnalyzer.for_model(tiny_gqa)
    run_analyzers(tiny_gqa, [all_at_once(batches)], [once], show_progress=False)
    assert streamed.sentences == once.sentences == 9
    # Padding changes float32 rounding of the patterns only: O(1) rows of <= 20 keys in other
    # batch shapes, 20 x 1.19e-7 relative in the measures (measured <= 4.1e-7)
    assert_tables_close(streamed.result(), once.result(), atol=1e-5)


def test_merge_of_two_halves_equals_the_whole(tiny_gqa):
    batches = make_batches(LENGTHS, seed=1)
    whole = SpectrumAnalyzer.for_model(tiny_gqa)
    run_analyzers(tiny_gqa, batches, [whole], show_progress=False)
    first, second = SpectrumAnalyzer.for_model(tiny_gqa), SpectrumAnalyzer.for_model(tiny_gqa)
    run_analyzers(tiny_gqa, batches[:1], [first], show_progress=False)
    run_analyzers(tiny_gqa, batches[1:], [second], show_progress=False)
    merged = first.merge(second)
    assert merged.sentences == whole.sentences
    assert_tables_close(merged.result(), whole.result(), atol=1e-12)  # same values, float64 sums
    with pytest.raises(ConfigError, match="other settings"):
        merged.merge(SpectrumAnalyzer([4, 4], rank_fractions=(0.5,)))


def test_analyzer_rows_average_per_sentence_reference(tiny_gqa):
    """The analyzer's means equal a per-sentence loop written independently in numpy."""
    batches = make_batches([[6, 11, 11]], seed=2)
    analyzer = SpectrumAnalyzer.for_model(tiny_gqa, rank_fractions=(0.25,))
    run_analyzers(tiny_gqa, batches, [analyzer], show_progress=False)
    tables = analyzer.result()
    batch = batches[0]
    _, cache = tiny_gqa.run_with_cache(**batch.model_inputs(), names_filter=None)
    for layer in range(2):
        pattern = cache["pattern", layer].double().numpy()
        values = {"cum_at_quarter": [], "effective_rank": [], "rank90": [], "p_error": []}
        for b, n in enumerate(batch.lengths.tolist()):
            s = np.linalg.svd(pattern[b, :, :n, :n], compute_uv=False)  # [head, n]
            c = np.cumsum(s, -1) / s.sum(-1, keepdims=True)
            c0 = np.concatenate([np.zeros((s.shape[0], 1)), c], -1)
            values["cum_at_quarter"].append([np.interp(n / 4, np.arange(n + 1), row) for row in c0])
            p = s / s.sum(-1, keepdims=True)
            values["effective_rank"].append(np.exp(-(p * np.log(p)).sum(-1)))
            values["rank90"].append((c < 0.9 - 1e-12).sum(-1) + 1)  # the analyzer's float64 slack
            k = math.ceil(n / 4)
            values["p_error"].append(np.sqrt((s[:, k:] ** 2).sum(-1) / (s**2).sum(-1)))
        summary = tables["spectrum_summary"].query("layer == @layer")
        cost = tables["low_rank_cost"].query("layer == @layer and measure == 'p_error'")
        for measure, rows in values.items():
            expected = np.mean(rows, axis=0)  # [head]
            got = (cost if measure == "p_error" else summary.query("measure == @measure"))
            # The analyzer's patterns come from another forward than the cache's (the cache
            # holds hook_result, which switches to per-head products): fp32 ~1e-7 relative in
            # layer 1's patterns; effective ranks up to ~11 amplify that to ~1e-6: 1e-6 was
            # below that -> 1e-5 (measured 1.8e-7 under ATEN_CPU_CAPABILITY=default)
            np.testing.assert_allclose(got["value"].to_numpy(), expected, atol=1e-5)


def test_tables_are_tidy_and_complete(tiny_gqa):
    analyzer = SpectrumAnalyzer.for_model(tiny_gqa)
    run_analyzers(tiny_gqa, make_batches(LENGTHS), [analyzer], show_progress=False)
    tables = analyzer.result()
    assert set(tables) == {
        "spectrum_summary", "spectrum_curve", "spectrum_curve_by_length", "low_rank_cost"
    }
    curve = tables["spectrum_curve"]
    assert list(curve.columns) == ["layer", "head", "fraction", "value"]
    assert len(curve) == 2 * 4 * 20
    by_length = tables["spectrum_curve_by_length"]
    assert set(by_length["bucket"]) == {"1-8", "9-16", "17-32"}
    assert by_length.groupby("bucket")["sentences"].first().to_dict() == {
        "1-8": 5, "9-16": 3, "17-32": 1  # lengths 5 7 7 3 4 | 12 9 9 | 20
    }
    without = SpectrumAnalyzer.for_model(tiny_gqa, low_rank_cost=False)
    assert "blocks.0.attn.hook_v" not in without.hook_names(tiny_gqa)
    run_analyzers(tiny_gqa, make_batches(LENGTHS), [without], show_progress=False)
    assert "low_rank_cost" not in without.result()
    with pytest.raises(ConfigError, match="no sentences"):
        SpectrumAnalyzer.for_model(tiny_gqa).result()


def test_causal_model_has_no_linformer_error_but_everything_else():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32, vocab_size=60,
                            n_ctx=64, causal=True, norm_position="pre", final_norm=True)
    model = HookedTransformer(cfg).eval()
    analyzer = SpectrumAnalyzer.for_model(model)
    assert "blocks.0.attn.hook_q" not in analyzer.hook_names(model)
    run_analyzers(model, make_batches(LENGTHS), [analyzer], show_progress=False)
    tables = analyzer.result()
    cost = tables["low_rank_cost"]
    assert cost[cost["measure"] == "linformer_error"]["value"].isna().all()
    assert cost[cost["measure"] != "linformer_error"]["value"].notna().all()
    assert tables["spectrum_summary"]["value"].notna().all()
