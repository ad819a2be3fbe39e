"""The C kernels' shared header (attnlens/kernel_common.h, setup.py's ``KERNEL_HEADER``): every
kernel of setup.py's ``KERNELS`` includes it and repeats none of it, and an sdist ships it
with the kernels (a kernel built from an sdist without it would not compile).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what the header holds, each in no kernel of its own
SHARED = ("#define PY_SSIZE_T_CLEAN", "target_clones", "_NO_CLONES", "#define STEP",
          "PyModuleDef_HEAD_INIT", "PyExc_ValueError, \"%s holds")


def setup_names() -> dict[str, object]:
    """setup.py's ``KERNELS`` and ``KERNEL_HEADER`` (read, not run: it calls setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    return {target.id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Name) and target.id in ("KERNELS", "KERNEL_HEADER")}


def test_every_kernel_includes_the_header_and_repeats_none_of_it():
    names = setup_names()
    header = Path(names["KERNEL_HEADER"])
    assert len(names["KERNELS"]) == 6
    for source in names["KERNELS"]:
        text = (ROOT / source).read_text()
        assert f'#include "{header.name}"' in text, source
        assert [shared for shared in SHARED if shared in text] == [], source
    text = (ROOT / header).read_text()
    assert [shared for shared in SHARED if shared not in text] == []


def test_the_sdist_ships_the_header_and_every_kernel(tmp_path):
    names = setup_names()
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
                    "sdist", "--dist-dir", str(tmp_path)], cwd=ROOT, check=True,
                   capture_output=True)
    (archive,) = tmp_path.glob("attnlens-*.tar.gz")
    with tarfile.open(archive) as sdist:
        shipped = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {names["KERNEL_HEADER"], *names["KERNELS"]} <= shipped
