"""The language-model head measures on a GPU: no host synchronisation in ``update_layer``,
and the same tables as on the CPU. Skipped without CUDA."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.lm_heads_toys import random_batches, toy_model, toy_tokenizer
from tests.test_analyzers_cuda import strict_updates
from tests.test_lm_heads_states import CASES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def frames_close(a: pd.DataFrame, b: pd.DataFrame) -> None:
    # fp32 attention on two devices: kernels differ by a few ulps of a weight <= 1; counts of
    # maxima (retrieval) can only differ where two keys tie within that rounding
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True),
                                  check_exact=False, rtol=1e-4, atol=1e-5, check_dtype=False)


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_run_matches_cpu_without_syncs_in_update_layer(case: str) -> None:
    make, _, data = CASES[case]
    cpu_model, gpu_model = toy_model(), toy_model().cuda()
    on_cpu, on_gpu = make(cpu_model), make(gpu_model)
    strict_updates(on_gpu)
    run_analyzers(cpu_model, data(), [on_cpu], show_progress=False)
    run_analyzers(gpu_model, data(), [on_gpu], show_progress=False)
    for name, table in on_cpu.result().items():
        theirs = on_gpu.result()[name]
        if name == "sink_keys":  # near-uniform heads: which keys are the top 3 is a near-tie
            table, theirs = (t[t["position"] == "first"] for t in (table, theirs))
            assert on_gpu.pairs == on_cpu.pairs
        frames_close(theirs, table)


def test_the_whole_measure_runs_on_a_gpu() -> None:
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.settings import LmHeadsSettings

    results = {}
    for device in ("cpu", "cuda"):
        model = toy_model().to(device)
        lm = LmHeads(LmHeadsSettings(probe_sequences=40, probe_length=10, window=4,
                                     sink_tokens=1, controls=5, ablation="mean").check(),
                     Inference(bootstrap=100))
        analyzers = lm.corpus_analyzers(model, toy_tokenizer())
        run_analyzers(model, random_batches(), analyzers, show_progress=False)
        results[device] = lm.compute(model)
    for name in ("probe_scores", "streaming_heads", "role_ablation", "kv_cache"):
        frames_close(results["cuda"].tables[name], results["cpu"].tables[name])
    frames_close(results["cuda"].role_tests, results["cpu"].role_tests)
