"""Build step for the C extensions and the package list; the metadata lives in pyproject.toml.

The packages are every package under ``attnlens/`` (a new ``attnlens/measures/<topic>/`` is
found without a line anywhere) and ``cli/`` installed as ``attnlens.cli`` (no top-level ``cli``
package is installed).

``attnlens.measures.spectrum._spectral_kernel`` (eigenvalues of many small Gram matrices, the CPU
spectral path) is optional: without a C compiler the package installs without it and the
spectrum falls back to LAPACK (slower, same results within 1e-9 on the curve).
``attnlens.measures.asymmetry._asymmetry_kernel`` (pattern asymmetry's norms and graph counts,
the CPU path) is optional the same way: without it the torch path runs (the same counts, the
ratios within float32 rounding).
"""

import os

from setuptools import Extension, find_packages, setup

setup(
    packages=[*find_packages(include=["attnlens", "attnlens.*"]), "attnlens.cli"],
    ext_modules=[
        Extension(
            "attnlens.measures.spectrum._spectral_kernel",
            sources=["attnlens/measures/spectrum/_spectral_kernel.c"],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "attnlens.measures.asymmetry._asymmetry_kernel",
            sources=["attnlens/measures/asymmetry/_asymmetry_kernel.c"],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-std=c99"],
            optional=True,
        ),
    ]
)
