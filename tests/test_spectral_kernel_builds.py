"""The spectral C kernel (attnlens/measures/spectrum/_spectral_kernel.c) built in each form a
CPU or compiler gets, against float64 eigenvalues and against the installed build.

The installed build holds one version per x86-64 level (GCC's target clones) and runs the
one this CPU supports; the other versions, the plain-C path of compilers without GCC's
vector extension, other lane counts and other numbers of groups in the QR sweeps
(``QR_GROUPS``: counts of matrices that leave groups empty) are built here, one version each
(``KERNEL_NO_CLONES``, tests/kernel_builds.py), with the C compiler Python was built with.
Every form does the same arithmetic in the same order without floating-point contraction, so
each gives the installed build's bits; all are checked against ``numpy.linalg.eigvalsh`` of
the float64 Gram matrix (tolerance: tests/test_spectral_kernel.py) on hand-built and random
matrices, sizes below, at and past multiples of the lane count and of the Gram matrix's
block (4). A build without -DLANES holds both lane counts (8 and 4) and chooses one for the
CPU (8 with AVX-512): both are compared bit for bit in each such build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlens.measures.spectrum import singular_values as spectral
from attnlens.measures.spectrum.singular_values import kernel_available, kernel_eigenvalues
from tests.kernel_builds import (
    CPU_FLAGS,
    LEVEL_BUILDS,
    V4,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)

SOURCE = Path(__file__).resolve().parents[1] / "attnlens/measures/spectrum/_spectral_kernel.c"
# name -> (compiler flags, what the CPU must have); every build is one version
BUILDS = {
    **LEVEL_BUILDS,
    "lanes 4": (["-DLANES=4"], set()),
    "lanes 16": (["-DLANES=16"], set()),
    "plain C": (["-DSPECTRAL_PLAIN_C"], set()),
    "plain C, lanes 3": (["-DSPECTRAL_PLAIN_C", "-DLANES=3"], set()),
    "QR one group": (["-DQR_GROUPS=1"], set()),
    "QR three groups": (["-DQR_GROUPS=3"], set()),
    # the QR sweeps in lane vectors (sweep_rows_vectors) are built for AVX-512 only
    "x86-64-v4, QR one group": (["-march=x86-64-v4", "-DQR_GROUPS=1"], V4),
    "x86-64-v4, QR three groups": (["-march=x86-64-v4", "-DQR_GROUPS=3"], V4),
    "plain C, QR three groups": (["-DSPECTRAL_PLAIN_C", "-DQR_GROUPS=3"], set()),
}

pytestmark = [
    pytest.mark.skipif(not kernel_available(), reason="the spectral C kernel is not built"),
    needs_builds,
]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(name)``: the kernel module built as ``BUILDS[name]`` (cached per module)."""
    built = {}
    folder = tmp_path_factory.mktemp("spectral_builds")

    def get(name: str):
        if name not in built:
            flags, needs = BUILDS[name]
            skip_unless_cpu_has(needs)
            where = folder / f"b{len(built)}"
            where.mkdir()
            built[name] = build_kernel(SOURCE, where, flags)
        return built[name]

    return get


def eigenvalues(module, P: torch.Tensor, lanes: int = 0) -> np.ndarray:
    """``[matrices, r]`` unsorted eigenvalues of the Gram matrices of ``P`` by ``module``, at
    ``lanes`` lanes (0: the module's choice, ``LANES``)."""
    count, m, n = P.shape
    out = np.empty((count, min(m, n)))
    failures = module.gram_eigenvalues(P.contiguous().numpy(), out, count, m, n,
                                       P.dtype == torch.float64, lanes)
    assert failures == 0
    return out


def reference(P: torch.Tensor) -> np.ndarray:
    X = P.double().numpy()
    G = X @ X.transpose(0, 2, 1) if P.shape[1] <= P.shape[2] else X.transpose(0, 2, 1) @ X
    return np.linalg.eigvalsh(G)  # [matrices, r] ascending


def cases() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(35)
    random = [torch.softmax(3 * torch.randn(count, m, n, generator=gen), dim=-1)
              for count, m, n in [(5, 1, 1), (3, 2, 2), (11, 3, 3), (7, 4, 4), (9, 5, 5),
                                  (17, 8, 8), (13, 9, 9), (4, 16, 16), (19, 17, 17),
                                  (6, 31, 31), (3, 33, 33), (2, 64, 64), (3, 65, 65),
                                  (1, 90, 90), (5, 7, 12), (5, 12, 7), (2, 30, 5), (2, 6, 41)]]
    n = 9
    hand = torch.stack([
        torch.eye(n),  # a diagonal Gram matrix: nothing to reduce
        torch.full((n, n), 1.0 / n),  # rank one
        torch.block_diag(torch.full((4, 4), 0.25), torch.eye(5)),  # splits in the middle
        torch.block_diag(*[torch.tensor([[0.5, 0.5], [0.5, 0.5]])] * 4, torch.ones(1, 1)),
        torch.zeros(n, n),  # all zero: trace 0
    ])
    signed = torch.randn(10, 21, 21, generator=gen, dtype=torch.float64)  # any real matrix
    return [*random, hand, signed]


@pytest.mark.parametrize("name", list(BUILDS))
def test_each_build_matches_float64_eigenvalues_and_the_installed_bits(build, name):
    module = build(name)
    for P in cases():
        for dtype in (torch.float32, torch.float64):
            X = P.to(dtype)
            got = eigenvalues(module, X)
            expected = reference(X)
            trace = np.maximum(expected.sum(-1, keepdims=True), 1e-300)
            worst = float((np.abs(np.sort(got, -1) - expected) / trace).max())
            assert worst <= 1e-13, (name, tuple(X.shape), dtype, worst)
            # the same arithmetic in the same order: bit for bit the installed kernel
            assert np.array_equal(got, kernel_eigenvalues(X).numpy()), (name, tuple(X.shape))


@pytest.mark.parametrize("name", ["x86-64", "x86-64-v4", "plain C, lanes 3", "lanes 16",
                                  "QR three groups"])
def test_each_build_isolates_lanes(build, name):
    """A matrix's values do not depend on its neighbours in its group of LANES, in any
    build (a lane that finishes its QR sweeps early keeps its values)."""
    module = build(name)
    gen = torch.Generator().manual_seed(7)
    P = torch.softmax(3 * torch.randn(37, 23, 23, generator=gen), dim=-1)
    P[5] = torch.eye(23)  # converges at once beside lanes that need many sweeps
    together = eigenvalues(module, P)
    for t in (0, 5, 17, 36):
        assert np.array_equal(eigenvalues(module, P[t:t + 1]), together[t:t + 1])


def awkward_cases() -> list[torch.Tensor]:
    """Counts that are no multiple of 4 or 8 (partial groups, empty QR groups), m != n,
    float32 and float64 input."""
    gen = torch.Generator().manual_seed(47)
    shapes = [(1, 5, 5), (3, 9, 9), (5, 7, 12), (13, 12, 7), (21, 23, 37), (7, 40, 40),
              (9, 64, 64), (2, 70, 33), (11, 1, 6), (6, 2, 2)]
    out = [torch.softmax(3 * torch.randn(*shape, generator=gen), dim=-1) for shape in shapes]
    out += [P.double() for P in out[2:6]]
    out.append(torch.randn(19, 17, 17, generator=gen, dtype=torch.float64))  # any real matrix
    return out


@pytest.mark.parametrize("name", ["installed", *LEVEL_BUILDS, "plain C"])
def test_both_lane_counts_give_the_same_bits(build, name):
    """Every build without -DLANES holds 8 and 4 lanes (the CPU's choice, LANES, is one of
    them): the same bits from both, and from the choice."""
    module = spectral._spectral_kernel if name == "installed" else build(name)
    assert module.LANES in (4, 8)
    for P in awkward_cases():
        wide, narrow = eigenvalues(module, P, 8), eigenvalues(module, P, 4)
        assert np.array_equal(wide, narrow), (name, tuple(P.shape), P.dtype)
        assert np.array_equal(eigenvalues(module, P), narrow), (name, tuple(P.shape))


def test_the_installed_build_chooses_8_lanes_with_avx512_and_4_without():
    chosen = spectral._spectral_kernel.LANES
    assert chosen == (8 if V4 <= CPU_FLAGS else 4)


@pytest.mark.parametrize("name", LEVEL_BUILDS)
def test_a_build_for_one_level_chooses_by_its_target(build, name):
    chosen = build(name).LANES
    assert chosen == (8 if name == "x86-64-v4" else 4)


def test_a_lane_count_not_built_is_refused(build):
    P = torch.softmax(torch.randn(3, 6, 6), dim=-1)
    with pytest.raises(ValueError, match="lanes"):
        eigenvalues(spectral._spectral_kernel, P, 16)
    only16 = build("lanes 16")  # -DLANES=16 builds that count alone
    assert only16.LANES == 16
    assert np.array_equal(eigenvalues(only16, P, 16), eigenvalues(only16, P))
    with pytest.raises(ValueError, match="lanes"):
        eigenvalues(only16, P, 8)
