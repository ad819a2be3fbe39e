"""The demo's critical path (issue 29, demo39): wordfreq imported before torch loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The command's body is stopped at its first import of the measures (made unimportable), so
# the modules loaded at that point are those the body loaded before torch.
STOPPED_BODY = """
import sys
sys.modules[sys.argv[2]] = None  # importing it raises ImportError: the body stops there
from attnlens.cli.app import main
try:
    main([sys.argv[1], "--out", sys.argv[3], "--force", "--quiet"])
except BaseException:
    pass
print("wordfreq" in sys.modules, "torch" in sys.modules)
"""


def test_import_wordfreq_loads_wordfreq_and_not_torch() -> None:
    code = ("import sys; from attnlens.data.wordfreq_import import import_wordfreq; "
            "import_wordfreq(); print('wordfreq' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(("command", "first_measure_import"), [
    ("analyze", "attnlens.measures.lm_heads.run"),
    ("heads", "attnlens.measures.heads.settings"),
])
def test_the_command_imports_wordfreq_before_torch(tmp_path, command: str,
                                                   first_measure_import: str) -> None:
    """wordfreq's import scans every loaded module (inspect.stack): ~0.13 s before torch,
    ~0.25 s after (main imported it while making the rare-word analyzer)."""
    done = subprocess.run([sys.executable, "-c", STOPPED_BODY, command, first_measure_import,
                           str(tmp_path / "out")], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-2:] == ["True", "False"], done.stdout + done.stderr
