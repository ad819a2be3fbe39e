"""Build step for the C extensions and the package list; the metadata lives in pyproject.toml.

The packages are every package under ``attnlens/`` (a new ``attnlens/measures/<topic>/`` is
found without a line anywhere) and ``cli/`` installed as ``attnlens.cli`` (no top-level ``cli``
package is installed).

Every C kernel (``KERNELS``: one source each, ``-O3 -std=c99``, so no floating-point
contraction) is optional: without a C compiler the package installs without it and its
Python path runs instead. Each includes ``KERNEL_HEADER`` (attnlens/kernel_common.h: the
target clones, the inlined steps, the buffer checks and the module table they share): its
folder is on the include path, a changed header rebuilds every kernel (``depends``), and the
sdist ships it (``depends`` from setuptools 68.1 on, MANIFEST.in before).

- ``attnlens.measures.spectrum._spectral_kernel`` (eigenvalues of many small Gram matrices,
  the CPU spectral path): without it the spectrum falls back to LAPACK (slower, same
  results within 1e-9 on the curve).
- ``attnlens.measures.asymmetry._asymmetry_kernel`` (pattern asymmetry's norms and graph
  counts, the CPU path): without it the torch path runs (the same counts, the ratios within
  float32 rounding).
- ``attnlens.measures.sparse._sparse_kernel`` (sparse coverage's masses and output errors,
  the CPU path): without it the torch path runs (within float32 rounding).
- ``attnlens.data._words_kernel`` (word pooling of whole patterns, and the syntactic and
  rare-word heads' credits, the CPU path): without it the torch path runs (the same hits).
- ``attnlens.measures.linear._linear_kernel`` (the linear-attention view's key geometry and
  output errors, the CPU path): without it the torch path runs (within float32 rounding).
- ``attnlens.measures.heads._stats_kernel`` (head statistics' per-row values of whole
  patterns, read by head statistics and head examples, the CPU path): without it the torch
  path runs (the same maxima and entries read, the sums within float32 rounding).
"""

import os

from setuptools import Extension, find_packages, setup

KERNELS = [
    "attnlens/measures/spectrum/_spectral_kernel.c",
    "attnlens/measures/asymmetry/_asymmetry_kernel.c",
    "attnlens/measures/sparse/_sparse_kernel.c",
    "attnlens/data/_words_kernel.c",
    "attnlens/measures/linear/_linear_kernel.c",
    "attnlens/measures/heads/_stats_kernel.c",
]
KERNEL_HEADER = "attnlens/kernel_common.h"

setup(
    packages=[*find_packages(include=["attnlens", "attnlens.*"]), "attnlens.cli"],
    ext_modules=[
        Extension(
            source.removesuffix(".c").replace("/", "."),
            sources=[source],
            include_dirs=[os.path.dirname(KERNEL_HEADER)],
            depends=[KERNEL_HEADER],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-std=c99"],
            optional=True,
        )
        for source in KERNELS
    ],
)
