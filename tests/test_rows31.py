"""rows31 (issue 29): ``stream.blocks.max_along`` (short rows' maxima by halving) gives
``amax``'s values bit for bit, and the analyzers that use it keep main's states."""

from __future__ import annotations

import pytest
import torch

from attnlens.stream.blocks import HALVING_UP_TO, PatternBlock, max_along


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 16, 17, 27, 31, 32, 33, 64])
@pytest.mark.parametrize("dim", [-1, -2])
def test_max_along_is_amax(n, dim):
    g = torch.Generator().manual_seed(n)
    x = torch.rand(3, 4, n, n, generator=g)
    x[0, 0] = 0.0  # a row of zeros (padding words)
    x[0, 1, :, : n // 2 + 1] = 0.5  # ties
    x[1, 0, 0, 0] = float("nan")  # NaN wins in both
    x[1, 1, -1, -1] = float("inf")
    x[1, 2, 0, -1] = -float("inf")
    x[2, 0] = -1.0  # the syntactic heads' fill values
    x[2, 1, :, 0] = -2.0
    found, expected = max_along(x, dim), x.amax(dim)
    assert found.shape == expected.shape
    assert torch.equal(found.isnan(), expected.isnan())
    assert torch.equal(found.nan_to_num(7.0), expected.nan_to_num(7.0))


def test_max_along_on_a_view_and_other_dtypes():
    x = torch.rand(2, 3, 9, 12).transpose(-1, -2)  # a non-contiguous view
    assert torch.equal(max_along(x, -1), x.amax(-1))
    assert torch.equal(max_along(x.double(), -2), x.double().amax(-2))
    ints = torch.randint(0, 9, (2, 5, 7))
    assert torch.equal(max_along(ints, -1), ints.amax(-1))  # integers: amax itself


def test_the_halving_path_is_taken_on_short_rows(monkeypatch):
    calls = []
    real = torch.Tensor.amax
    monkeypatch.setattr(torch.Tensor, "amax", lambda self, *a, **k: calls.append(1)
                        or real(self, *a, **k))
    max_along(torch.rand(2, 3, HALVING_UP_TO), -1)
    assert calls == []
    max_along(torch.rand(2, 3, HALVING_UP_TO + 1), -1)
    assert calls == [1]


def test_pattern_block_row_max_is_amax():
    p = torch.rand(2, 3, 11, 11).softmax(-1)
    block = PatternBlock.whole(p, 0)
    assert torch.equal(block.row_max, p.amax(-1))
    assert torch.equal(block.is_max, p == p.amax(-1, keepdim=True))
