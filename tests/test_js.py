"""The report's and the viewer's scripts: ESLint and node's unit tests (tests/js), from pytest.

`make test` and `make test-js` run both directly (installing node with apt when missing);
here they skip with the reason when node or the pinned ESLint (npm ci) is absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make test-js installs Debian's nodejs)")
    return node


def test_node_unit_tests_of_the_page_scripts_pass() -> None:
    result = subprocess.run([_node(), "--test", "tests/js/"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass 0" not in result.stdout


def test_eslint_finds_nothing_in_the_page_scripts() -> None:
    node = _node()
    eslint = ROOT / "node_modules" / "eslint" / "bin" / "eslint.js"
    if not eslint.is_file():
        pytest.skip("ESLint is not installed (make test-js runs npm ci)")
    result = subprocess.run([node, str(eslint), "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
