"""Aten operations the analyzers dispatch per batch do not grow per layer or per sentence.

Issue 29: the corpus pass's analyzers dispatched 6,402 aten operations per batch of MiniLM
(the forward itself 383), at ~6 us of Python and dispatcher each on a 2-core machine. Some
came from a loop per layer (pattern asymmetry read each layer in ~155 small operations;
the language-model sink keys counted each layer's top keys with ~35 tensor operations on the
host) and some from a loop per sentence (rare words wrote two tensor items per sentence and
rank, head examples indexed each used sentence's ids). Here the operations each analyzer's
feeding methods dispatch in one batch (a ``TorchDispatchMode`` counter, views included) are
counted on tiny models of 2 and 6 layers and on batches of 4 and 8 sentences; their growth
per added layer and per added sentence must stay under each analyzer's bound below. The bounds
are what is left after the rewrite (a few operations per layer to add each layer's sums into
its own slice of the state), well under the loops they replaced, which this test fails on.
"""

from __future__ import annotations

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

FEEDING = ("begin_batch", "update_layer", "update_block", "end_layer", "end_batch")

# analyzer -> (most operations per added layer, most per added sentence), one batch.
# Before issue 29's rewrite (measured on this test's inputs), per layer: pattern asymmetry
# 153, head examples 117, syntactic heads 72, rare words 49, positional heads 46, sink keys 45,
# head statistics 38, head behaviour 24, sink scores 15; per sentence: rare words 16, head
# examples 3. After it: 15, 18, 15, 15, 8, 13, 29, 15, 2; 0, 0.
BOUNDS = {
    # per layer: the C kernel's call (its outputs, the buffers it reads), the layer's counts
    # and weighted sum over sentences added into its slice, the baseline's input held (1
    # view); the torch path (GPUs): the held layer, then per held layer the weighted sum
    "asymmetry: PatternAsymmetry": (30, 0),
    # per layer: the block's column sums and the layer's top keys; counted on the host
    "lm_heads: SinkKeys": (15, 0),
    # per layer: the first token's column (a gather), held; the sums made once per batch
    "heads: SinkScores": (5, 0),
    "lm_heads: SinkScores": (5, 0),
    # per layer: each measure's value per row (one to three operations each, computed once
    # per block and shared with the head examples; on the CPU the C kernel's call), held;
    # weighed and summed once per batch (checked on both paths)
    "heads: HeadStats": (32, 0),
    # per layer: the rows' vertical and diagonal mass and broadness, held; summed once
    "heads: HeadBehaviour": (18, 0),
    # per layer: the layer's word rows, held (their pooling is shared with the syntactic
    # heads); per sentence: nothing (the host's counts are NumPy arrays, one tensor a batch)
    "heads: RareWordHeads": (20, 0),
    # per layer: the layer's word rows, held; rows and columns counted once per batch
    "heads: SyntacticHeads": (20, 0),
    # per layer: each row's maxima and their credit (shared per block), held
    "heads: PositionalHeads": (12, 0),
    # per layer: the rows' values (shared with the head statistics) and the pattern, held;
    # per sentence: nothing (the used sentences' ids are read from one NumPy copy)
    "heads: HeadExamples": (25, 0),
}


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _ops_in_last_batch(model, batches, analyzer) -> int:
    """Operations ``analyzer``'s feeding methods dispatch while the last of ``batches`` is fed
    (the first batch pays what a run does once: moving state, building caches)."""
    seen = {"batch": -1, "ops": 0}

    def wrap(name, method):
        def run(*args, **kwargs):
            if name == "begin_batch":
                seen["batch"] += 1
            if seen["batch"] < len(batches) - 1:
                return method(*args, **kwargs)
            with _Ops() as mode:
                result = method(*args, **kwargs)
            seen["ops"] += mode.n
            return result
        return run

    for name in FEEDING:
        if hasattr(analyzer, name):
            setattr(analyzer, name, wrap(name, getattr(analyzer, name)))
    run_analyzers(model, batches, [analyzer], show_progress=False)
    return seen["ops"]


@pytest.fixture(scope="module")
def counts() -> dict[str, dict[tuple[int, int], int]]:
    return count_operations()


def count_operations() -> dict[str, dict[tuple[int, int], int]]:
    """``{analyzer: {(layers, sentences per batch): operations in one batch}}``."""
    from attnlens.data.corpus import load_corpus
    from attnlens.report.analyze import default_sections
    from tests.pruning_toys import vocab_size, word_tokenizer

    tokenizer = word_tokenizer()
    corpus = load_corpus(text=None, treebank=None)
    found: dict[str, dict[tuple[int, int], int]] = {}
    for layers, size in ((2, 4), (6, 4), (2, 8)):
        model = tiny_model(seed=0, n_layers=layers, vocab_size=vocab_size(), n_ctx=128,
                           n_token_types=0)
        batches = corpus.batches(tokenizer, batch_size=size)[:2]
        assert [b.size for b in batches] == [size, size]
        for section in default_sections():
            for analyzer in section.analyzers(model, tokenizer):
                name = f"{section.name}: {type(analyzer).__name__}"
                if name in BOUNDS:
                    found.setdefault(name, {})[layers, size] = _ops_in_last_batch(
                        model, batches, analyzer)
    return found


@pytest.fixture(scope="module")
def torch_path_counts() -> dict[str, dict[tuple[int, int], int]]:
    """``count_operations`` with the head statistics' C kernel hidden: the torch path a GPU
    runs (the kernel's CPU path dispatches fewer: 17 per layer against 29)."""
    import attnlens.measures.heads.head_stats as head_stats

    kernel = head_stats._stats_kernel
    head_stats._stats_kernel = None
    try:
        return count_operations()
    finally:
        head_stats._stats_kernel = kernel


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_operations_per_batch_stay_bounded(counts, name):
    check_bounds(counts, name)


@pytest.mark.parametrize("name", ["heads: HeadExamples", "heads: HeadStats"])
def test_the_torch_paths_operations_stay_bounded(torch_path_counts, name):
    check_bounds(torch_path_counts, name)


def check_bounds(counts: dict[str, dict[tuple[int, int], int]], name: str) -> None:
    per_layer, per_sentence = BOUNDS[name]
    ops = counts[name]
    assert ops[2, 4] > 0, ops  # the analyzer was fed and counted
    if per_layer is not None:
        assert (ops[6, 4] - ops[2, 4]) / 4 <= per_layer, ops
    if per_sentence is not None:
        assert (ops[2, 8] - ops[2, 4]) / 4 <= per_sentence, ops
