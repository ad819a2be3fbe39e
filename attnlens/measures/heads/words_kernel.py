"""The CPU path of the syntactic and rare-word heads for whole patterns (``_words_kernel.c``).

Per layer, the shared ``WordAttentionContext`` pools the pattern into word rows once
(``kernel_weights``: the torch path's float32 operations in its order, the same bits), then
one C pass per analyzer reads each (sentence, head) word matrix once and credits the arcs or
attending words from the rows' and columns' maxima and ties, adding the credits in the torch
path's order. So the hits equal the torch path's (kept for GPUs, for query blocks of long
inputs and where the extension is not built) without its dozen passes over held layers.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlens.data import words as word_module
from attnlens.data.batch import Batch
from attnlens.data.words import WordAttentionContext
from attnlens.stream.threads import run_split


def by_sentence(items: np.ndarray, n_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``items [item, width]`` (column 0: the sentence) stably sorted by sentence, as int32,
    and each sentence's first item ``[batch + 1]`` (int32)."""
    order = np.argsort(items[:, 0], kind="stable")
    items = np.ascontiguousarray(items[order], dtype=np.int32)
    start = np.zeros(n_batch + 1, dtype=np.int32)
    start[1:] = np.cumsum(np.bincount(items[:, 0], minlength=n_batch))
    return items, start


def kernel_credits(name: str, words: WordAttentionContext, batch: Batch, layer: int,
                   pattern: torch.Tensor, items: tuple, out_rows: int,
                   out_width: int) -> torch.Tensor:
    """``_words_kernel.<name>`` (``syntactic`` or ``rare``) over the word rows of the layer's
    whole pattern ``[batch, head, query_pos, key_pos]``, with its ``items`` arguments (arcs or
    rows and their sentences' offsets; for ``rare`` also the row width and the exclude
    flag): the credits ``[out_rows, out_width, head]`` (float32). The (sentence, head) pairs
    are split between the intra-op threads (the kernel releases the GIL)."""
    weights = words.kernel_weights(batch, layer, pattern)  # [batch, head, word, key_word]
    starts, _ = words.token_lists(batch)
    n_batch, n_heads, n_words, _ = weights.shape
    out = torch.zeros(out_rows, out_width, n_heads)
    function = getattr(word_module._words_kernel, name)
    args = (weights.numpy(), starts, *items, n_batch, n_heads, n_words)
    buffer = out.numpy()
    run_split(lambda first, stop: function(*args, first, stop, buffer), n_batch * n_heads)
    return out
