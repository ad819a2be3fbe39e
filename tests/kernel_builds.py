"""Building a C kernel one version at a time, for the tests that compare each build's bits.

The installed kernels hold one version per x86-64 level (GCC's target clones) and run the
one the CPU supports; ``build_kernel`` compiles a source as one version (``-O3 -std=c99 -Wall
-Werror -DKERNEL_NO_CLONES``, the kernels' shared header attnlens/kernel_common.h on the
include path, plus the tests' flags, e.g. ``-march``) with the C compiler Python was built
with, and imports it from ``folder``.
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

COMPILER = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0])
HEADERS = Path(__file__).resolve().parents[1] / "attnlens"  # kernel_common.h
V3 = {"avx2", "fma", "bmi2", "movbe", "f16c"}  # what x86-64-v3 code needs of the CPU
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}  # x86-64-v4
# the build forms every kernel's tests compare: name -> (compiler flags, what the CPU must have)
LEVEL_BUILDS = {"x86-64": ([], set()), "x86-64-v3": (["-march=x86-64-v3"], V3),
                "x86-64-v4": (["-march=x86-64-v4"], V4)}

# for the tests that build: GCC-style flags, x86-64 Linux
needs_builds = pytest.mark.skipif(
    COMPILER is None or platform.machine() not in ("x86_64", "AMD64")
    or platform.system() != "Linux",
    reason="builds the kernel with GCC-style flags on x86-64 Linux")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags")
            for flag in line.split(":", 1)[1].split()}


CPU_FLAGS = cpu_flags()


def skip_unless_cpu_has(needs: set[str]) -> None:
    """Skip the test where the CPU lacks one of ``needs`` (a build it could not run)."""
    if not needs <= CPU_FLAGS:
        pytest.skip(f"this CPU lacks {sorted(needs - CPU_FLAGS)}")


def build_kernel(source: Path, folder: Path, flags: list[str],
                 clones: bool = False) -> ModuleType:
    """The extension ``source`` compiled as one version with ``flags`` into ``folder`` (empty,
    made by the caller) and imported under a name of its own (several builds live side by
    side); with ``clones``, as setup.py builds it instead (one version per x86-64 level)."""
    name = source.stem  # the module's init function is named after it
    library = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([COMPILER, "-O3", "-std=c99", "-Wall", "-Werror", "-fPIC", "-shared",
                    f"-I{sysconfig.get_paths()['include']}", f"-I{HEADERS}",
                    *([] if clones else ["-DKERNEL_NO_CLONES"]), *flags, str(source),
                    "-o", str(library)],
                   check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location(f"{folder.name}.{name}", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
