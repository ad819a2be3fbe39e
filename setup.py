"""Build step for the one C extension; the project's metadata lives in pyproject.toml.

``attnlens.measures.spectrum._spectral_kernel`` (eigenvalues of many small Gram matrices, the CPU
spectral path) is optional: without a C compiler the package installs without it and the
spectrum falls back to LAPACK (slower, same results within 1e-9 on the curve).
"""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "attnlens.measures.spectrum._spectral_kernel",
            sources=["attnlens/measures/spectrum/_spectral_kernel.c"],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-std=c99"],
            optional=True,
        )
    ]
)
