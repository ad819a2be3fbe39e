"""T5's bucketed relative position bias: one learned score offset per (bucket, head).

The offset ``key_pos - query_pos`` is mapped to a bucket: small distances get a bucket each,
larger ones share logarithmically wider buckets up to ``max_distance``, beyond which every
distance shares the last one. Bidirectional stacks (T5's encoder) spend half the buckets on
each direction; causal stacks (the decoder) use all of them for keys at or before the query.
The bias is computed once per forward pass and added to every layer's scores (T5 learns it in
the first layer and shares it), unscaled.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket ``[0, num_buckets)`` of each offset ``key_pos - query_pos`` (T5's rule)."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)  # keys after the query: distance 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets from max_exact to max_distance (float32, as T5 computes them)
    large = max_exact + (
        torch.log(distance.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """Additive score bias ``[1, head, query_pos, key_pos]`` from ``weight [bucket, head]``."""

    def __init__(self, n_buckets: int, n_heads: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_buckets, n_heads))
        self.n_buckets, self.max_distance = n_buckets, max_distance
        self.bidirectional = bidirectional

    def forward(self, query_len: int, key_len: int) -> torch.Tensor:
        return self.rows(0, query_len, key_len)

    def rows(self, start: int, stop: int, key_len: int) -> torch.Tensor:
        """Query rows ``start:stop`` of ``forward(query_len, key_len)``: ``[1, head, rows,
        key_pos]`` (the bias of a block of query rows)."""
        device = self.weight.device
        query = torch.arange(start, stop, dtype=torch.long, device=device)[:, None]
        key = torch.arange(key_len, dtype=torch.long, device=device)[None, :]
        bucket = relative_position_bucket(
            key - query, self.bidirectional, self.n_buckets, self.max_distance
        )  # [query_pos, key_pos]
        values = self.weight[bucket]  # [query_pos, key_pos, head]
        return values.permute(2, 0, 1).unsqueeze(0)  # [1, head, query_pos, key_pos]

    def extra_repr(self) -> str:
        return (f"n_buckets={self.n_buckets}, max_distance={self.max_distance}, "
                f"bidirectional={self.bidirectional}")
