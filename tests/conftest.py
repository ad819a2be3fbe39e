"""Shared fixtures: the real MiniLM (loaded once per session) and the shared data folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_file(relative: str) -> Path:
    """A file under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data exists only beside the project checkout)")
    return path


@pytest.fixture(scope="session")
def minilm():
    """(model, tokenizer) of the embedded all-MiniLM-L6-v2, fp32, CPU, eval mode."""
    import attnlens

    return attnlens.load()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def sample_report(tmp_path_factory) -> Path:
    """`attnlens analyze --quiet` on the embedded model and sample treebank, run once."""
    out = tmp_path_factory.mktemp("sample_report")
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli", "analyze", "--out", str(out), "--quiet"],
        cwd=out, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    return out
