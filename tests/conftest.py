"""Shared fixtures (``tests/fixtures.py``) and the automatic test kinds (markers).

Every test gets one or more markers by what it does, decided from its source when the suite is
collected (``kinds_of``: the test function, the module-level helpers and fixtures it uses,
followed through the tests' own modules), so a new test needs no marker by hand:

- ``cli``: starts a process (``subprocess``, ``sys.executable``): the commands run as a user
  runs them, a fresh interpreter for import checks, torchrun;
- ``e2e``: reads the real corpora of ../shared/data (``shared_file``, ``SHARED_DATA``) or
  drives a browser (``tests/browser_utils.py``, selenium);
- ``parity``: a ``tests/test_parity_*.py`` module (attnlens against Hugging Face);
- ``unit``: none of the above (it may still load the embedded MiniLM or build tiny models).

``make test-fast`` runs ``-m "not cli and not e2e"`` (no subprocess, no real corpus);
``make test`` runs everything. docs/architecture.md: Tests.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures import *  # noqa: F403 (the shared fixtures: tiny models, CLI runner, batches)

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


# Automatic test kinds -----------------------------------------------------------------------
TESTS_DIR = Path(__file__).resolve().parent
KIND_PATTERNS = {
    "cli": re.compile(r"\bsubprocess\b|\bsys\.executable\b"),
    "e2e": re.compile(r"\bshared_file\(|\bSHARED_DATA\b|\bselenium\b|\bbrowser_utils\b"),
}
_SOURCES: dict[object, tuple[str, list]] = {}


def _source_and_callees(fn) -> tuple[str, list]:
    """A tests/ function's source and the tests/ functions its names refer to."""
    if fn in _SOURCES:
        return _SOURCES[fn]
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except (OSError, TypeError, SyntaxError):
        source, names = "", set()
    namespace = getattr(fn, "__globals__", {})
    callees = [namespace[n] for n in sorted(names) if _in_tests(namespace.get(n))]
    _SOURCES[fn] = (source, callees)
    return _SOURCES[fn]


def _in_tests(obj) -> bool:
    if not inspect.isfunction(obj):
        return False
    path = inspect.getsourcefile(obj) or ""
    return Path(path).resolve().is_relative_to(TESTS_DIR)


def kinds_of(item: pytest.Item) -> set[str]:
    """The kinds (markers) of one collected test (see the module docstring)."""
    todo = [item.function] if hasattr(item, "function") else []
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        todo += [d.func for d in defs if _in_tests(d.func)]
    seen, text = set(), []
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        source, callees = _source_and_callees(fn)
        text.append(source)
        todo += callees
    found = "\n".join(text)
    kinds = {kind for kind, pattern in KIND_PATTERNS.items() if pattern.search(found)}
    if item.path.name.startswith("test_parity_"):
        kinds.add("parity")
    return kinds or {"unit"}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for kind in sorted(kinds_of(item)):
            item.add_marker(kind)
