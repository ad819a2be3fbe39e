"""The tests' one set of shared builders and fixtures: tiny models, batches and the CLI.

Builders (plain functions, import them): ``tiny_config`` / ``tiny_model`` (a small BERT-like
``HookedTransformer``, biases drawn away from 0), ``plain_tiny_model`` (the config's own
defaults, nothing redrawn), ``tiny_encoder_decoder``, ``tiny_inputs`` and ``tiny_batches``
(padded ``Batch`` objects of given lengths), ``run_cli`` / ``start_cli`` (the command in a
fresh interpreter, as a user runs it) and ``invoke_cli`` (in-process, through Typer's runner).

Fixtures (``tests/conftest.py`` makes them available everywhere): ``tiny`` (``tiny_model()``,
one per session), ``tiny_gqa`` (two key/value heads for four query heads, one per session) and
``cli`` (``invoke_cli`` that fails the test on a non-zero exit unless ``ok=False``).
Session models are shared: a test that changes a model builds its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer

# The smallest model every analyzer runs on: 2 layers of 4 heads of width 4.
TINY = dict(d_model=16, n_layers=2, n_heads=4, d_mlp=32, vocab_size=50, n_ctx=32)
BERT_LIKE = dict(n_token_types=2, embed_norm=True, pad_token_id=0)
CLI = [sys.executable, "-m", "attnlens.cli.app"]


# Models -------------------------------------------------------------------------------------
def tiny_config(**overrides: Any) -> TransformerConfig:
    """``TINY`` with BERT's token types, embedding norm and padding id 0, then ``overrides``."""
    return TransformerConfig(**{**TINY, **BERT_LIKE, **overrides})


def tiny_model(seed: int = 0, **overrides: Any) -> HookedTransformer:
    """A ``tiny_config`` model in eval mode, seeded, its biases drawn from N(0, 0.1) so that
    every bias matters."""
    torch.manual_seed(seed)
    model = HookedTransformer(tiny_config(**overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("bias", "b_Q", "b_K", "b_V", "b_O")):
                p.normal_(std=0.1)
    return model.eval()


def plain_tiny_model(seed: int = 0, **overrides: Any) -> HookedTransformer:
    """``TINY`` with ``TransformerConfig``'s own defaults and ``overrides``, seeded, eval mode,
    initialised as the model initialises itself."""
    torch.manual_seed(seed)
    return HookedTransformer(TransformerConfig(**{**TINY, **overrides})).eval()


def tiny_encoder_decoder(seed: int = 0, config=None):
    """An ``EncoderDecoderTransformer`` of ``config``, seeded; biases and norms drawn away from
    0 and 1 (relative position biases from N(0, 1)) so that every part matters."""
    from attnlens.model.encoder_decoder import EncoderDecoderTransformer

    torch.manual_seed(seed)
    model = EncoderDecoderTransformer(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or "b_" in name:
                p.normal_(0.0, 0.1)
            elif "rel_pos_bias" in name:
                p.normal_(0.0, 1.0)
    return model


# Inputs -------------------------------------------------------------------------------------
def tiny_inputs(batch: int = 3, length: int = 7, vocab: int = 50) -> dict[str, torch.Tensor]:
    """Random ids with the second sequence padded by two (padding id 0)."""
    ids = torch.randint(1, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length - 2 :] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def tiny_batches(lengths: list[list[int]], seed: int = 0, vocab: int = 60, low: int = 1,
                 cls_id: int | None = None, index: bool = False) -> list[Batch]:
    """One padded ``Batch`` per group of ``lengths`` (ids from ``low`` to ``vocab - 1``, padding
    0, drawn from a generator seeded with ``seed``). ``cls_id``: the first token of every
    sequence, marked special; ``index``: corpus indices in ``extra`` as ``Corpus.batches``
    gives them."""
    gen = torch.Generator().manual_seed(seed)
    batches, seen = [], 0
    for group in lengths:
        width = max(group)
        ids = torch.randint(low, vocab, (len(group), width), generator=gen)
        mask = (torch.arange(width)[None, :] < torch.tensor(group)[:, None]).long()
        special = None
        if cls_id is not None:
            ids[:, 0] = cls_id
            special = (ids == cls_id) & mask.bool()
        extra = {"index": list(range(seen, seen + len(group)))} if index else {}
        seen += len(group)
        batches.append(Batch(input_ids=ids * mask, attention_mask=mask, special_mask=special,
                             extra=extra))
    return batches


# The command line ---------------------------------------------------------------------------
def run_cli(*args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess:
    """``attnlens ARGS`` in a fresh interpreter (stdout and stderr captured as text);
    ``env``: variables added to this process's; ``check``: fail the test on a non-zero exit."""
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env=None if env is None else {**os.environ, **env})
    if check:
        assert result.returncode == 0, result.stderr
    return result


def start_cli(*args: str, cwd: str | Path | None = None) -> subprocess.Popen:
    """``attnlens ARGS`` started in a fresh interpreter, its output piped (to interrupt it)."""
    return subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def invoke_cli(*args: str, ok: bool | None = None):
    """``attnlens ARGS`` in this process (Typer's ``CliRunner``); ``ok=True`` fails the test on
    a non-zero exit (with the output), ``ok=False`` on a zero one."""
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [str(a) for a in args])
    if ok is True:
        assert result.exit_code == 0, result.output
    elif ok is False:
        assert result.exit_code != 0, result.output
    return result


# Fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny() -> HookedTransformer:
    """``tiny_model()``, built once per session (do not change it)."""
    return tiny_model()


@pytest.fixture(scope="session")
def tiny_gqa() -> HookedTransformer:
    """Grouped-query attention: 4 query heads share 2 key/value heads (vocabulary 60, 64
    positions), built once per session (do not change it)."""
    return plain_tiny_model(0, vocab_size=60, n_ctx=64, n_kv_heads=2)


@pytest.fixture
def cli():
    """``invoke_cli`` failing the test on a non-zero exit unless called with ``ok=False``."""

    def run(*args: str, ok: bool = True):
        return invoke_cli(*args, ok=ok)

    return run
