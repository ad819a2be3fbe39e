"""``tests/conftest.py: SLOW`` names tests that exist: a renamed test would silently join the
fast loop again."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SLOW

TESTS = Path(__file__).resolve().parent


def test_every_slow_entry_names_a_test_function() -> None:
    missing = []
    for entry in sorted(SLOW):
        module, _, name = entry.partition("::")
        path = TESTS / module
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else None
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} if tree else ()
        if name not in names:
            missing.append(entry)
    assert not missing, f"SLOW names tests that do not exist: {missing}"
