"""How the hooked attention path splits a long pattern into blocks of query rows.

The hooked (manual) path computes ``softmax(q k^T * scale + mask)`` for ``rows`` query rows
at a time against every key (each row's softmax is complete within its block, so a block is
exactly those rows of the whole pattern) and hands each block to the hooks that accept blocks
(``attnlens.hooks.accepts_query_blocks``), never holding ``[batch, head, T, T]``. A hook that
needs the whole matrix still gets it when ``T <= whole_matrix_limit`` and is refused above
(``WholeMatrixError``, naming it). docs/long-context.md has the rules and the measurements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from attnlens.errors import ConfigError

DEFAULT_WHOLE_MATRIX_LIMIT = 4096  # query positions
MIN_BUDGET = 16 << 20  # bytes of one float32 block: below this the whole matrix is one block
MAX_BUDGET = 1 << 30
FREE_SHARE = 64  # a block takes at most 1/64 of the free memory (analyzers make a few copies)
ROW_MULTIPLE = 64


class WholeMatrixError(ConfigError):
    """An analysis or hook needs a whole attention matrix above the whole-matrix limit."""


@dataclass(frozen=True)
class QueryBlocks:
    """``rows``: query rows per block (None: chosen from free memory, ``auto_block_rows``);
    ``whole_matrix_limit``: the longest input (query positions) whose whole pattern a hook
    that does not accept blocks may get."""

    rows: int | None = None
    whole_matrix_limit: int = DEFAULT_WHOLE_MATRIX_LIMIT

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows < 1:
            raise ConfigError(f"--query-block must be at least 1 query row, not {self.rows}.")
        if self.whole_matrix_limit < 0:
            raise ConfigError("--whole-matrix-limit must be at least 0 tokens, not "
                              f"{self.whole_matrix_limit}.")

    def block_rows(self, batch: int, heads: int, query_len: int, key_len: int,
                   device: torch.device) -> int:
        """Query rows per block for a ``[batch, heads, query_len, key_len]`` pattern (at most
        ``query_len``: one block is then the whole matrix)."""
        if self.rows is not None:
            return min(self.rows, query_len)
        return auto_block_rows(batch, heads, query_len, key_len, device)

    def check_whole(self, query_len: int, needs: str) -> None:
        """Refuse ``needs`` (an analysis or hook) a whole matrix above the limit."""
        if query_len > self.whole_matrix_limit:
            raise WholeMatrixError(
                f"{needs} needs whole attention matrices, and this input has {query_len:,} "
                f"tokens, above the whole-matrix limit of {self.whole_matrix_limit:,}; leave "
                "that analysis out, use a smaller --max-length, or raise --whole-matrix-limit "
                "(docs/long-context.md)."
            )


DEFAULT_BLOCKS = QueryBlocks()


def whole_matrix_note(analysis: str, model: object) -> str:
    """The report's line for an analysis that needs whole attention matrices."""
    blocks = getattr(model, "query_blocks", DEFAULT_BLOCKS)
    return (f"{analysis} need whole attention matrices: inputs longer than the whole-matrix "
            f"limit ({blocks.whole_matrix_limit:,} tokens, --whole-matrix-limit) are refused "
            "(docs/long-context.md).")


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device``: CUDA's free memory, else the host's MemAvailable."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
    return int(pages * os.sysconf("SC_PAGE_SIZE")) if pages else 4 << 30


def auto_block_rows(batch: int, heads: int, query_len: int, key_len: int,
                    device: torch.device) -> int:
    """Rows per block so one float32 block takes at most 1/64 of the free memory (between
    16 MiB and 1 GiB), in multiples of 64; the whole matrix when it fits in 16 MiB."""
    row_bytes = 4 * batch * heads * key_len
    if row_bytes * query_len <= MIN_BUDGET:
        return query_len  # short inputs: one block, and no system call
    budget = min(max(free_memory(device) // FREE_SHARE, MIN_BUDGET), MAX_BUDGET)
    rows = budget // max(row_bytes, 1)
    if rows >= ROW_MULTIPLE:
        rows -= rows % ROW_MULTIPLE
    return int(min(max(rows, 1), query_len))
