"""Stacks of attention matrices packed for the viewer page: exact float32, dense or sparse.

``PACKED`` (base64 fields are little-endian arrays)::

    {"format": "dense", "count": m, "n": n, "dtype": "float32", "data": b64 [m, n, n]}
  | {"format": "sparse", "count": m, "n": n, "dtype": "float32", "mass": 0.95,
     "cap": k | None, "index_bits": 16 | 32,
     "offsets": b64 uint32 [m * n + 1],   # row r's entries are offsets[r] .. offsets[r + 1]
     "index": b64 uint16 | uint32 [nnz],  # key positions, largest weight first
     "value": b64 float32 [nnz],          # the weights, exactly as the model computed them
     "rest_mass": b64 float32 [m * n],    # the row's weight not stored (row sum - stored)
     "rest_count": b64 uint32 [m * n],    # the row's keys not stored that the mask allows
     "stats": {"rows", "covered", "min_stored_mass", "mean_entries"}}

Dense when every weight fits ``budget_bytes``; otherwise each query row keeps its largest
weights until they hold ``mass`` (95 %) of the row's sum, at most ``cap`` per row, where the
cap is the largest that keeps the whole stack within the budget (rows that need fewer
entries leave room for the others). A stored weight is the model's float32 value, bit for
bit; a weight not stored is at most the row's smallest stored one, and the page shows it as
the row's mean unstored weight ``rest_mass / rest_count`` (stated on the page).

``thumbnails`` are the model view's pictures: the maximum of each block of the full
matrices (``adaptive_max_pool2d``), computed before any weight is dropped.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

DEFAULT_BUDGET = 12_000_000  # bytes of packed weights before base64: pages stay < 20 MB
KEEP_MASS = 0.95  # each sparse row keeps its largest weights up to this share of its sum
THUMB = 80  # thumbnail side in cells (block maxima of longer matrices)
MIN_CANDIDATES = 128  # top-k candidates kept per row while streaming (at least)
ROW_BYTES = 12  # per-row overhead of the sparse form: offset, rest mass, rest count


def b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def unb64(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


@dataclass
class RowCandidates:
    """Each row's ``k`` largest weights of a stack of matrices, with what the rest sums to.

    ``values`` / ``index [count, query_pos, k]`` (largest first; values float32 as computed),
    ``row_sum [count, query_pos]`` (float64).
    """

    values: np.ndarray
    index: np.ndarray
    row_sum: np.ndarray
    n: int

    @property
    def count(self) -> int:
        return int(self.values.shape[0])

    @classmethod
    def concat(cls, parts: list[RowCandidates]) -> RowCandidates:
        k = min(p.values.shape[-1] for p in parts)
        return cls(np.concatenate([p.values[..., :k] for p in parts]),
                   np.concatenate([p.index[..., :k] for p in parts]),
                   np.concatenate([p.row_sum for p in parts]), parts[0].n)


def candidate_count(n: int, rows: int, budget_bytes: int) -> int:
    """How many of each row's largest weights to keep while streaming: enough for any cap
    the budget can afford (twice the mean per row), at least ``MIN_CANDIDATES``."""
    per_row = max(1, (budget_bytes - rows * ROW_BYTES) // (rows * 6))
    return int(min(n, max(MIN_CANDIDATES, 2 * per_row)))


def row_candidates(matrices: torch.Tensor | np.ndarray, k: int) -> RowCandidates:
    """``matrices [count, query_pos, key_pos]`` -> each row's ``k`` largest weights."""
    full = torch.as_tensor(matrices)
    n = int(full.shape[-1])
    k = min(k, n)
    values, index, sums = [], [], []
    for matrix in full:  # one [query_pos, key_pos] at a time: topk's temporaries stay small
        matrix = matrix.float()  # on the model's device: only the top k come to the CPU
        top = torch.topk(matrix, k, dim=-1, sorted=True)  # [query_pos, k]
        values.append(top.values.cpu().numpy())
        index.append(top.indices.to(torch.int32).cpu().numpy())
        sums.append(matrix.sum(-1).double().cpu().numpy())  # fp32 pairwise sums: ~n * 1e-8 off
    return RowCandidates(np.stack(values), np.stack(index), np.stack(sums), n)


def thumbnails(matrices: torch.Tensor | np.ndarray, size: int = THUMB) -> np.ndarray:
    """``[count, side, side]`` block maxima (side = min(n, size)) of ``[count, n, n]``."""
    full = torch.as_tensor(matrices).float()
    side = min(int(full.shape[-1]), size)
    return torch.nn.functional.adaptive_max_pool2d(full, (side, side)).cpu().numpy()


def pack_thumbnails(thumbs: np.ndarray) -> dict[str, Any]:
    """Thumbnails as 16-bit codes (value = code / 65535; pictures, not numbers to read)."""
    count, side, _ = thumbs.shape
    codes = np.rint(np.clip(thumbs, 0.0, 1.0) * 65535)
    return {"count": int(count), "side": int(side), "reduce": "max",
            "data": b64(codes, "<u2")}


def _water_fill(need: np.ndarray, entries: int) -> int | None:
    """The largest per-row cap c with sum(min(need, c)) <= entries (None: no cap needed)."""
    if int(need.sum()) <= entries:
        return None
    low, high = 1, int(need.max())
    while low < high:
        mid = (low + high + 1) // 2
        if int(np.minimum(need, mid).sum()) <= entries:
            low = mid
        else:
            high = mid - 1
    return low


def pack_sparse(cand: RowCandidates, budget_bytes: int, mass: float = KEEP_MASS,
                causal: bool = False) -> dict[str, Any]:
    """Each row's largest weights up to ``mass`` of its sum, capped to fit ``budget_bytes``;
    ``causal``: query i's keys are 0..i (the others are masked, so never counted as rest)."""
    count, n, k = cand.values.shape
    rows = count * n
    values = cand.values.reshape(rows, k)
    index = cand.index.reshape(rows, k)
    row_sum = cand.row_sum.reshape(rows)
    allowed = np.tile(np.arange(1, n + 1) if causal else np.full(n, n), count)  # [row]
    positive = (values > 0).sum(-1)
    cumulative = np.cumsum(values.astype(np.float64), axis=-1)  # [row, k]
    # Entries needed to reach `mass` of the row's sum (k when even k do not).
    need = (cumulative < mass * row_sum[:, None]).sum(-1) + 1
    need = np.minimum(need, positive)
    index_bits = 16 if n <= 65536 else 32
    entry_bytes = index_bits // 8 + 4
    entries = max(rows, (budget_bytes - rows * ROW_BYTES) // entry_bytes)
    cap = _water_fill(need, entries)
    keep = need if cap is None else np.minimum(need, cap)  # [row]
    take = np.arange(k)[None, :] < keep[:, None]  # [row, k]
    stored = np.where(take, values, 0).astype(np.float64).sum(-1)
    rest_mass = np.maximum(row_sum - stored, 0.0)
    rest_count = np.maximum(allowed - keep, 0)
    offsets = np.concatenate([[0], np.cumsum(keep)])
    covered = stored >= mass * row_sum - 1e-12
    share = np.divide(stored, row_sum, out=np.ones_like(stored), where=row_sum > 0)
    return {
        "format": "sparse", "count": int(count), "n": int(n), "dtype": "float32",
        "mass": mass, "cap": cap, "index_bits": index_bits,
        "offsets": b64(offsets, "<u4"),
        "index": b64(index[take], "<u2" if index_bits == 16 else "<u4"),
        "value": b64(values[take], "<f4"),
        "rest_mass": b64(rest_mass, "<f4"),
        "rest_count": b64(rest_count, "<u4"),
        "stats": {"rows": int(rows), "covered": int(covered.sum()),
                  "min_stored_mass": float(share.min()) if rows else 1.0,
                  "mean_entries": float(keep.mean()) if rows else 0.0},
    }


def dense_fits(count: int, n: int, budget_bytes: int) -> bool:
    return count * n * n * 4 <= budget_bytes


def pack_dense(matrices: np.ndarray) -> dict[str, Any]:
    count, n, _ = matrices.shape
    return {"format": "dense", "count": int(count), "n": int(n), "dtype": "float32",
            "data": b64(matrices, "<f4")}


def pack_matrices(matrices: np.ndarray | torch.Tensor, budget_bytes: int = DEFAULT_BUDGET,
                  mass: float = KEEP_MASS, causal: bool = False) -> dict[str, Any]:
    """``matrices [count, n, n]`` packed dense when they fit ``budget_bytes``, else sparse."""
    full = torch.as_tensor(matrices).float()
    count, n, _ = full.shape
    if dense_fits(count, n, budget_bytes):
        return pack_dense(full.numpy())
    rows = count * n
    return pack_sparse(row_candidates(full, candidate_count(n, rows, budget_bytes)),
                       budget_bytes, mass, causal)


def unpack_matrices(packed: dict[str, Any]) -> np.ndarray:
    """``[count, n, n]`` float32 of a packed stack; weights not stored come back as 0."""
    count, n = packed["count"], packed["n"]
    if packed["format"] == "dense":
        return unb64(packed["data"], "<f4").reshape(count, n, n).copy()
    offsets = unb64(packed["offsets"], "<u4").astype(np.int64)
    index = unb64(packed["index"], "<u2" if packed["index_bits"] == 16 else "<u4")
    value = unb64(packed["value"], "<f4")
    out = np.zeros((count * n, n), dtype=np.float32)
    rows = np.repeat(np.arange(count * n), np.diff(offsets))
    out[rows, index.astype(np.int64)] = value
    return out.reshape(count, n, n)


def rest_means(packed: dict[str, Any]) -> np.ndarray:
    """``[count, n]`` the mean weight of each row's unstored allowed keys (0 when none), as
    the page draws them."""
    count, n = packed["count"], packed["n"]
    if packed["format"] == "dense":
        return np.zeros((count, n), dtype=np.float32)
    mass = unb64(packed["rest_mass"], "<f4").astype(np.float64)
    many = unb64(packed["rest_count"], "<u4").astype(np.float64)
    mean = np.divide(mass, many, out=np.zeros_like(mass), where=many > 0)
    return mean.reshape(count, n)
