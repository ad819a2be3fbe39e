"""The scripts in examples/ run and print what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("attention_patterns.py", "layer 5 head"),
        ("ablate_head.py", "without head 2.5"),
        ("factored_circuits.py", "QK effective rank"),
        ("heads_power.py", "power of the syntactic-head test"),
        ("positional_min_sentences.py", "true share 0.9 = threshold"),
    ],
)
def test_example_runs(script: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
