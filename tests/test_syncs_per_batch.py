"""Host transfers and GPU-synchronising solvers of whole `analyze` runs, on the CPU.

A GPU run (tests/test_cuda.py::test_no_synchronisation_per_layer_on_cuda) found two analyzers
whose waits for the device grew with depth outside the per-layer methods: the language-model
sink keys moved each layer's top keys to the host on its own, and path collapse ran the
singular-value solver once per path length. Here the same runs are counted on any machine:
the calls that move values to the host or wait for a GPU solver there (``.cpu()``,
``.item()``, ``nonzero`` and the ``torch.linalg`` solvers) made anywhere in a run, for a
2-layer and a 4-layer model: no analyzer may make more of them with more layers. (``.tolist()``
and ``.numpy()`` are left out: analyzers use them on what they moved to the host already, which
on the CPU cannot be told apart from a device tensor.)
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

WAITS = frozenset({"cpu", "item", "nonzero", "linalg_svdvals", "linalg_svd", "linalg_eigvalsh",
                   "linalg_eigh", "linalg_solve"})


class _Waits(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in WAITS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def _count(model, batches, analyzers) -> Counter:
    with _Waits() as mode:
        run_analyzers(model, batches, analyzers, show_progress=False)
    return mode.counts


@pytest.fixture(scope="module")
def counts() -> dict[str, dict[int, Counter]]:
    from attnlens.data.corpus import load_corpus
    from attnlens.report.analyze import default_sections
    from tests.pruning_toys import vocab_size, word_tokenizer

    tokenizer = word_tokenizer()
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8)[:2]
    found: dict[str, dict[int, Counter]] = {}
    for layers in (2, 4):
        model = tiny_model(seed=0, n_layers=layers, vocab_size=vocab_size(), n_ctx=128,
                           n_token_types=0)
        base = _count(model, batches, [])
        for section in default_sections():
            for analyzer in section.analyzers(model, tokenizer):
                name = f"{section.name}: {type(analyzer).__name__}"
                found.setdefault(name, {})[layers] = _count(model, batches, [analyzer]) - base
    return found


def test_no_analyzer_waits_more_with_depth(counts):
    growing = {name: {n: dict(c) for n, c in by_depth.items()}
               for name, by_depth in counts.items()
               if any(by_depth[4][k] > by_depth[2][k] for k in by_depth[4])}
    assert not growing, f"waits for the device growing with depth (2 vs 4 layers): {growing}"


def test_the_fixed_analyzers_are_counted(counts):
    """The two analyzers the GPU run caught make the calls counted here (so the test above
    can see them): one transfer of the top keys, one solver run per batch."""
    keys = counts["lm_heads: SinkKeys"]
    paths = counts["collapse: PathCollapse"]
    for layers in (2, 4):
        assert keys[layers]["cpu"] >= 2, keys  # the top keys of 2 batches, and the batch's ids
        assert paths[layers]["linalg_svdvals"] == 2, paths  # one chunk of paths per batch


def test_the_counter_sees_each_kind_of_wait():
    x = torch.rand(2, 3, 3)
    with _Waits() as mode:
        x.cpu(), x.tolist(), torch.linalg.svdvals(x), x.nonzero()
    assert mode.counts == Counter({"cpu": 1, "linalg_svdvals": 1, "nonzero": 1})
