"""Count host reads of tensor data in analyzers' per-layer work (a GPU synchronisation each).

On a GPU, reading a tensor's values on the host (``.item()``, ``.tolist()``, ``.cpu()``,
``bool(t)``, ``int(t)``, ``torch.nonzero``, ...) waits for every queued kernel: a
synchronisation. Inside the per-layer loop that serialises the GPU once per layer and head.
``count_host_reads`` counts such calls made by ``update_layer`` (and, for analyzers fed query
blocks, ``update_block`` and ``end_layer``: once per block and per layer) on any device (a
``TorchFunctionMode`` sees every tensor method and torch function), so the same check runs
on the CPU; ``count_cuda_syncs`` counts the synchronisations CUDA itself reports
(``torch.cuda.set_sync_debug_mode``) where a GPU is present.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Tensor methods and torch functions whose result needs the tensor's values on the host.
HOST_READS = frozenset({
    "item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__",
    "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "equal",
    "allclose",
})


class _HostReadCounter(TorchFunctionMode):
    def __init__(self, counts: Counter) -> None:
        super().__init__()
        self.counts = counts
        self.active = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.active and name in HOST_READS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


PER_LAYER_METHODS = ("update_layer", "update_block", "end_layer")


@contextmanager
def count_host_reads(analyzers: Sequence[Any]) -> Iterator[Counter]:
    """Within the block, count host reads made inside each analyzer's per-layer and
    per-block methods (``PER_LAYER_METHODS``).

    Yields a Counter keyed ``"<Analyzer>.<function>"``.
    """
    counts: Counter = Counter()
    mode = _HostReadCounter(Counter())
    originals: list[tuple[Any, Callable]] = []

    def wrap(analyzer, original):
        def per_layer(*args, **kwargs):
            mode.counts = Counter()
            mode.active += 1
            try:
                return original(*args, **kwargs)
            finally:
                mode.active -= 1
                for name, n in mode.counts.items():
                    counts[f"{type(analyzer).__name__}.{name}"] += n
        return per_layer

    for analyzer in analyzers:
        if getattr(analyzer, "layerwise", False):
            for method in PER_LAYER_METHODS:
                if hasattr(analyzer, method):
                    originals.append((analyzer, method))
                    setattr(analyzer, method, wrap(analyzer, getattr(analyzer, method)))
    try:
        with mode:
            yield counts
    finally:
        for analyzer, method in reversed(originals):
            delattr(analyzer, method)  # back to the class's method


@contextmanager
def count_cuda_syncs() -> Iterator[list[str]]:
    """Record CUDA's own synchronisation warnings (``set_sync_debug_mode("warn")``)."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found: list[str] = []
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            found.extend(str(w.message) for w in caught if "synchroniz" in str(w.message))
