"""Helpers shared by the parity, loader and export tests: tiny random HF models and comparisons.

The building and measuring live in ``attnlens.loaders.verify`` and ``parity_inputs``
(`attnlens models --verify` uses them too); this module adds the assertions the tests make.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from attnlens.loaders.parity_inputs import (  # noqa: F401 (re-exported for the tests)
    VOCAB,
    PaddedBatch,
    padded_batch,
    save_tiny,
)
from attnlens.loaders.verify import (  # noqa: F401 (re-exported for the tests)
    TINY,
    TINY_TOL,
    Outputs,
    attnlens_outputs,
    hf_outputs,
    max_differences,
)


def assert_parity(diffs: dict[str, float], tol: float = TINY_TOL, label: str = "") -> None:
    print(f"parity {label}: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    assert not bad, f"{label}: differences above {tol}: {bad}"


def check_parity(hf_model, model, batch: PaddedBatch, tol: float = TINY_TOL, label: str = ""):
    """Compare every layer's attention, hidden states and logits; return the differences."""
    diffs = max_differences(attnlens_outputs(model, batch), hf_outputs(hf_model, batch),
                            batch.attention_mask)
    assert_parity(diffs, tol, label)
    return diffs


def load_pair(model_cls, config, path: Path):
    """(HF model, attnlens model) for a freshly saved tiny checkpoint in ``path``."""
    from attnlens.loaders import load_model

    hf = save_tiny(model_cls, config, path)
    return hf, load_model(path)


def tiny_parity(model_cls, config, path: Path, batch: PaddedBatch, label: str):
    """Save, load and compare one tiny model; returns (HF model, attnlens model, diffs)."""
    hf, ours = load_pair(model_cls, config, path)
    assert ours.cfg.source["architecture"] == model_cls.__name__
    return hf, ours, check_parity(hf, ours, batch, label=label)


@contextmanager
def hf_softmax_in_input_dtype() -> Iterator[None]:
    """Hugging Face eager attention with its softmax in the input's dtype.

    transformers' eager Llama-family attention calls ``softmax(..., dtype=torch.float32)``
    even on float64 scores, so its float64 patterns are float32-precise (~1e-7); attnlens
    runs a float64 model's softmax in float64 (issue 23). Inside this context a float32
    softmax requested on float64 input runs in float64, everything else is unchanged: the
    reference is then the same computation in float64 throughout.
    """
    functional = torch.nn.functional
    original = functional.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if input.dtype == torch.float64 and dtype == torch.float32:
            dtype = None
        return original(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    functional.softmax = softmax
    try:
        yield
    finally:
        functional.softmax = original
