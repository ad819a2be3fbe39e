"""Analyzers on a GPU: state stays on the device, no host synchronisation per layer.

Skipped without CUDA. Each analyzer's ``update_layer``, ``update_block`` and ``end_layer``
run under ``torch.cuda.set_sync_debug_mode("error")``, which raises on any call that waits
for the GPU (``.item()``, ``.cpu()``, ``int(tensor)``, a boolean mask index); results match a
CPU run.
"""

from __future__ import annotations

import functools

import pandas as pd
import pytest
import torch

from attnlens.stream.runner import run_analyzers
from tests.test_analyzer_states import CASES, batches, model_for

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def strict_updates(analyzer) -> None:
    """Make every per-layer feeding call raise if it synchronises with the host.

    ``update_layer``, ``update_block`` and ``end_layer`` are all wrapped (block analyzers are
    fed through the latter two); nested calls restore the mode they found.
    """
    for name in ("update_layer", "update_block", "end_layer"):
        setattr(analyzer, name, _strict(getattr(analyzer, name)))


def _strict(method):
    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return method(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(previous)

    return wrapped


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_run_matches_cpu_without_syncs_in_update_layer(case: str) -> None:
    make, _ = CASES[case]
    model = model_for(case)
    on_cpu = make(model)
    run_analyzers(model, batches(), [on_cpu], show_progress=False)
    gpu_model = model_for(case).cuda()
    on_gpu = make(gpu_model)
    if on_gpu.layerwise:
        strict_updates(on_gpu)
    run_analyzers(gpu_model, batches(), [on_gpu], show_progress=False)
    state = on_gpu.state_dict()  # also runs what an analyzer holds back (collapse variants)
    on_device = [f for f in on_gpu.state_fields if f not in on_gpu.host_fields]
    tensors = [v for f in on_device for v in _tensors(getattr(on_gpu, f))]
    assert not on_device or tensors, f"{case}: no state tensor on the device"
    assert all(t.device.type == "cuda" for t in tensors), case
    assert all(t.device.type == "cpu" for f in state["state"].values() for t in _tensors(f))
    a, b = on_gpu.result(), on_cpu.result()
    for name in a:
        # float32 patterns from GPU and CPU kernels: ~1e-6 relative; threshold counts can flip
        # one pair of a few hundred.
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=False, rtol=1e-3,
                                      atol=1e-3)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    return []
