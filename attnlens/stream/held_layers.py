"""A batch's layers held a while, then handed over stacked: one call for several layers.

Analyzers whose per-head arithmetic is the same at every layer (and independent across
heads) save most of their cost, on short sentences, by treating a batch's layers as more
heads: ``[batch, layer * head, ...]`` in one call instead of one small call per layer (the
cost of small calls is their number, not their arithmetic). ``HeldLayers`` keeps each
layer's tensors until ``budget`` elements are held (memory stays bounded: a long input holds
one layer at a time, as without it), then ``take`` concatenates runs of layers with equal
shapes along their head axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DEFAULT_BUDGET = 1 << 22  # elements held (16 MiB of float32) before an analyzer folds them


class HeldLayers:
    """Per-layer tensors of one batch, held until ``budget`` elements, then stacked."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self.layers: list[int] = []
        self.tensors: list[tuple[torch.Tensor, ...]] = []
        self.elements = 0

    def __bool__(self) -> bool:
        return bool(self.layers)

    def add(self, layer: int, *tensors: torch.Tensor, counted: int | None = None) -> bool:
        """Hold ``tensors`` of ``layer``; True once the budget is reached (time to take).
        ``counted``: the elements to count instead of theirs (a reader that holds a whole
        batch's tensors but reads a sample of its sentences counts what it reads, so that
        it folds at the layers it folded at when it held a copy of the sample)."""
        self.layers.append(layer)
        self.tensors.append(tensors)
        self.elements += sum(t.numel() for t in tensors) if counted is None else counted
        return self.elements >= self.budget

    def take(self, dims: Sequence[int]) -> list[tuple[list[int], list[torch.Tensor]]]:
        """Empty the store: ``(layers, tensors)`` per run of consecutive held layers whose
        tensors have equal shapes, the ``i``-th tensors of those layers concatenated along
        ``dims[i]`` (their head axes: layer-major, ``layer * n_heads + head``)."""
        return [(layers, [parts[0] if len(parts) == 1 else torch.cat(parts, dim)
                          for parts, dim in zip(zip(*items, strict=True), dims, strict=True)])
                for layers, items in self.take_apart()]

    def take_apart(self) -> list[tuple[list[int], list[tuple[torch.Tensor, ...]]]]:
        """Empty the store: ``take``'s runs of layers, each layer's tensors as they were held
        (for a reader that folds the layers of a run one by one but sums them together: a C
        kernel that reads each layer where it lies instead of a copy of them all)."""
        runs: list[tuple[list[int], list[tuple[torch.Tensor, ...]]]] = []
        shapes = None
        for layer, tensors in zip(self.layers, self.tensors, strict=True):
            mine = [t.shape for t in tensors]
            if runs and mine == shapes:
                runs[-1][0].append(layer)
                runs[-1][1].append(tensors)
            else:
                runs.append(([layer], [tensors]))
                shapes = mine
        self.layers, self.tensors, self.elements = [], [], 0
        return runs


def add_to_layers(target: torch.Tensor, layers: Sequence[int], x: torch.Tensor) -> None:
    """``target[layer] += x[i]`` for each ``layers[i]``, over the leading part of every
    other axis that ``x [len(layers), ...]`` covers (``[:heads]`` of a pruned layer).
    Consecutive layers are one slice (no index tensor: nothing is copied to a GPU)."""
    within = tuple(slice(0, n) for n in x.shape[1:])
    first = layers[0]
    if list(layers) == list(range(first, first + len(layers))):
        target[(slice(first, first + len(layers)), *within)] += x
        return
    for i, layer in enumerate(layers):
        target[(layer, *within)] += x[i]
