"""The long probes' batches (language-model heads): a layer's pattern within
``LONG_PATTERN_ELEMENTS``, and the streaming errors of any batch size the same."""

from __future__ import annotations

import numpy as np
import pytest

from attnlens.measures.lm_heads.run import (
    LONG_BATCH,
    LONG_PATTERN_ELEMENTS,
    LmHeads,
    long_batch_size,
)
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.measures.lm_heads.streaming import StreamingError
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers


class _Heads:
    def __init__(self, heads: list[int]) -> None:
        self.heads_per_layer = heads


@pytest.mark.parametrize(("heads", "width", "expected"), [
    ([12] * 6, 266, 4),  # MiniLM's long probes: 4 x 12 x 266^2 = 3.40 M entries
    ([12] * 6, 10, LONG_BATCH),  # short: the cap
    ([32, 8], 600, 1),  # one probe alone over the budget still runs
    ([4], 1024, 1),
])
def test_long_batch_size_keeps_a_layer_s_pattern_within_the_budget(heads, width,
                                                                   expected) -> None:
    size = long_batch_size(_Heads(heads), width)
    assert size == expected
    per_probe = max(heads) * width * width
    assert size == 1 or size * per_probe <= LONG_PATTERN_ELEMENTS
    assert size == LONG_BATCH or (size + 1) * per_probe > LONG_PATTERN_ELEMENTS


def test_minilm_long_probe_errors_do_not_depend_on_the_batch_size(minilm) -> None:
    """MiniLM's 10 long probes (266 tokens, all of one length: no padding) in batches of 8
    (the former size), of ``long_batch_size`` (4) and of 1: the same mean streaming error per
    head. Each probe's float32 errors are the same bits in any batch (measured); only their
    float64 sum over the batches is added in another order (4e-16 relative measured), so
    1e-12 relative."""
    model, tokenizer = minilm
    lm = LmHeads(LmHeadsSettings().check(), Inference(bootstrap=0))
    lm.corpus_analyzers(model, tokenizer)
    long = lm.long_probes(model, lm._frame(model))
    width = long.input_ids.shape[1]
    assert len(long) == 10 and bool(long.attention_mask.all())
    errors = {}
    for size in sorted({LONG_BATCH, long_batch_size(model, width), 1}):
        streaming = StreamingError.for_model(model, 4, 64)
        run_analyzers(model, long.batches(size), [streaming], show_progress=False,
                      stop_when_fed=True)
        assert streaming.sentences == 10
        errors[size] = streaming.mean_errors()  # [layer, head]
    assert long_batch_size(model, width) < LONG_BATCH
    reference = errors.pop(LONG_BATCH)
    assert np.isfinite(reference).all() and (reference > 0).all()
    for got in errors.values():
        np.testing.assert_allclose(got, reference, rtol=1e-12, atol=0)
