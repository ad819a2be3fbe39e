"""Spectrum and asymmetry on the real MiniLM: float64 numpy reference, real-corpus invariants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlens.data.text import sample_sentences, text_batches
from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry
from attnlens.measures.spectrum.spectrum import (
    SpectrumAnalyzer,
    cumulative_curve,
    singular_values,
    truncation_errors,
)
from attnlens.stream.runner import run_analyzers

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
UD_SENTENCES = 200


def ud_texts(limit: int) -> list[str]:
    """The ``# text =`` lines of the first ``limit`` UD English EWT dev sentences."""
    path = SHARED_DATA / "ud-ewt" / "en_ewt-ud-dev.conllu"
    if not path.is_file():
        return []
    texts = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("# text = "):
                texts.append(line[len("# text = "):].strip())
                if len(texts) == limit:
                    break
    return texts


@pytest.fixture(scope="module")
def corpus_run(minilm):
    """One pass over the sample sentences (+ 200 UD sentences if present).

    Singular values and asymmetry on everything; the low-rank costs (eigenvectors, the
    slow part) on the 50 sample sentences only, to keep the test fast.
    """
    model, tokenizer = minilm
    sample, ud = sample_sentences(), ud_texts(UD_SENTENCES)
    spectrum = SpectrumAnalyzer.for_model(model, low_rank_cost=False)
    costs = SpectrumAnalyzer.for_model(model)
    asymmetry = PatternAsymmetry.for_model(model)
    batches = text_batches(tokenizer, sample, batch_size=32, max_length=128)
    run_analyzers(model, batches, [spectrum, costs, asymmetry], show_progress=False)
    if ud:
        batches = text_batches(tokenizer, ud, batch_size=32, max_length=128)
        run_analyzers(model, batches, [spectrum, asymmetry], show_progress=False)
    tables = {**spectrum.result(), "low_rank_cost": costs.result()["low_rank_cost"]}
    return len(sample) + len(ud), tables, asymmetry.result()


def test_corpus_includes_ud_when_present(corpus_run):
    n_texts, tables, _ = corpus_run
    if not ud_texts(1):
        pytest.skip(f"{SHARED_DATA} is absent: the other tests ran on the 50 sample sentences only")
    expected = 50 + UD_SENTENCES
    assert n_texts == expected
    counts = tables["spectrum_curve_by_length"].groupby("bucket")["sentences"].first()
    assert counts.sum() == expected


def test_real_shares_lie_in_unit_interval_and_curves_are_monotone(corpus_run):
    _, tables, _ = corpus_run
    summary = tables["spectrum_summary"]
    for measure in ("cum_at_quarter", "effective_rank_frac", "rank90_frac", "rank99_frac"):
        values = summary[summary["measure"] == measure]["value"]
        assert values.between(0, 1).all(), measure
    # float64 below: exp(H) >= 1, curves and errors within ~1e-15 of their exact ranges
    assert (summary.query("measure == 'effective_rank'")["value"] >= 1 - 1e-9).all()
    r90 = summary.query("measure == 'rank90'")["value"].to_numpy()
    r99 = summary.query("measure == 'rank99'")["value"].to_numpy()
    assert (r90 <= r99).all()
    for name, x in (("spectrum_curve", "fraction"), ("spectrum_curve_by_length", "k")):
        curve = tables[name]
        keys = ["layer", "head"] + (["bucket"] if "bucket" in curve else [])
        for _, rows in curve.groupby(keys):
            values = rows.sort_values(x)["value"].to_numpy()
            assert (np.diff(values) >= -1e-12).all(), name
            assert values[-1] == pytest.approx(1.0, abs=1e-9), name
            assert values.min() >= 0
    cost = tables["low_rank_cost"]
    for measure in ("p_error", "output_error"):
        values = cost[cost["measure"] == measure]
        assert values["value"].between(0, 1 + 1e-9).all()
        # More singular values, smaller error.
        for _, rows in values.groupby(["layer", "head"]):
            assert (np.diff(rows.sort_values("k_fraction")["value"].to_numpy()) <= 1e-12).all()
    assert (cost[cost["measure"] == "linformer_error"]["value"] > 0).all()


def test_real_asymmetry_shares_and_baseline(corpus_run):
    _, _, tables = corpus_run
    patterns = tables["pattern_asymmetry"]
    for measure in ("directed_share", "reciprocity"):
        assert patterns[patterns["measure"] == measure]["value"].between(0, 1).all(), measure
    ratio = patterns[patterns["measure"] == "asym_ratio"]["value"]
    assert ratio.between(0, math.sqrt(2)).all()
    baseline = tables["asymmetry_baseline"].set_index(["measure", "layer"])["value"]
    # Symmetric logits imply alpha_ij alpha_ji <= alpha_ii alpha_jj: never broken.
    assert (baseline["product_violations"] == 0).all()
    assert baseline["asym_ratio"].between(0, math.sqrt(2)).all()
    # The learned heads are far more asymmetric than the symmetric-logit baseline.
    per_layer = patterns[patterns["measure"] == "asym_ratio"].groupby("layer")["value"].mean()
    assert (per_layer > baseline["asym_ratio"]).all()


def test_independent_float64_numpy_reference_on_real_matrices(minilm):
    """A few real attention matrices: numpy float64 SVD against the analyzer's path."""
    model, tokenizer = minilm
    texts = sample_sentences()[:3]
    batch = text_batches(tokenizer, texts, batch_size=3)[0]
    with torch.no_grad():
        _, cache = model.run_with_cache(
            **batch.model_inputs(),
            names_filter=lambda n: n.endswith(("hook_pattern", "hook_v")),
        )
    lengths = batch.lengths.tolist()
    for layer in (0, 3, 5):
        pattern = cache["pattern", layer]
        values = cache["v", layer]
        for b, n in enumerate(lengths):
            P = pattern[b, :, :n, :n]  # [head, n, n]
            s = singular_values(P)  # the analyzer's path (auto: the float64 Gram)
            curve = cumulative_curve(s)
            curve64 = cumulative_curve(singular_values(P, "gram64"))  # the path for n > 32
            for head in (0, 7, 11):
                Pn = P[head].double().numpy()
                U, S, Wt = np.linalg.svd(Pn)
                reference = np.cumsum(S) / S.sum()
                # float64 Gram eigenvalues err by ~2.2e-16 s_1^2, so s_i by ~2.2e-16 s_1^2 / s_i,
                # < 1e-12 for these matrices' s_i (measured 1.9e-12 and 7.4e-13 on the curves)
                np.testing.assert_allclose(s[head].numpy(), S, atol=1e-6)
                np.testing.assert_allclose(curve[head].numpy(), reference, atol=1e-6)
                np.testing.assert_allclose(curve64[head].numpy(), reference, atol=1e-9)
                Vn = values[b, :n, head].double().numpy()
                k = math.ceil(n / 4)
                Pk = (U[:, :k] * S[:k]) @ Wt[:k]
                expected = np.linalg.norm((Pn - Pk) @ Vn) / np.linalg.norm(Pn @ Vn)
                _, _, out_err = truncation_errors(P[head], values[b, :n, head], [k])
                assert float(out_err[0]) == pytest.approx(expected, abs=1e-6)  # float64 (2e-15)
