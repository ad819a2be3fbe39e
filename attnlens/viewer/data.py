"""The numbers behind the attention viewer: one text's tokens and every head's attention,
captured in one forward pass and packed for the page.

Format of the page's data (``ViewData.payload``; PACKED and THUMBS: ``packing.py``)::

    {"kind": "viewer", "version": 2, "model", "text",
     "tokens": [...],            # the tokenizer's own strings, space markers kept (Ġthe, ▁the)
     "pieces": [str | None],     # each token's text as it reads, with the whitespace before
                                 # it (None: special tokens); joined they give the text
     "n", "layers", "heads": [H_0, ...], "kv_heads": [KV_0, ...],  # GQA: KV_l < H_l
     "causal": bool,             # key > query is masked (drawn hatched, not as weight 0)
     "prompt_length": p | None,  # --generate: tokens p.. were generated
     "generation": {...} | None, "trained": {"tokens", "source"} | None, "warnings": [...],
     "roles": {"source", "view", "heads": [{"layer", "head", "roles", "evidence"}]} | None,
     "patterns": PACKED,         # every head's [query_pos, key_pos], layer-major
     "thumbs": THUMBS,           # block maxima of each head's full matrix (model view)
     "overlays": [{"name", "label", "about", "per": "layer", "matrices": PACKED,
                   "thumbs": THUMBS}],
     "initial": {"layer", "heads", "view", ...}}

Short inputs keep every layer's patterns whole (``ViewData.patterns``); longer ones (above
``KEEP_WHOLE_BYTES`` of float32 weights) are reduced layer by layer as the forward pass
produces them: each row's largest weights and the thumbnails are kept, never the whole stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlens.model.head_ids import head_ids_of
from attnlens.viewer.packing import (
    DEFAULT_BUDGET,
    KEEP_MASS,
    RowCandidates,
    candidate_count,
    pack_matrices,
    pack_sparse,
    pack_thumbnails,
    row_candidates,
    thumbnails,
)

KEEP_WHOLE_BYTES = 256_000_000  # float32 patterns kept whole below this, reduced above
ROLLOUT_MAX_TOKENS = 1024  # rollout multiplies [n, n] matrices: n^3 per layer
FALLBACK_LENGTH = 512  # --max-length when the checkpoint states no trained length


@dataclass
class Streamed:
    """Long inputs: each row's largest weights and the thumbnails, per head, layer-major."""

    candidates: RowCandidates
    thumbs: np.ndarray  # [layer * head, side, side]


@dataclass
class ViewData:
    """One text's tokens and attention: per layer ``[head, query_pos, key_pos]`` patterns
    (``patterns``) or, for long inputs, their reduction (``streamed``)."""

    tokens: list[str]
    patterns: list[np.ndarray] | None = None
    model: str = ""
    text: str = ""
    overlays: list[dict[str, Any]] = field(default_factory=list)
    pieces: list[str | None] | None = None
    heads: list[int] | None = None
    kv_heads: list[int] | None = None
    causal: bool = False
    prompt_length: int | None = None
    generation: dict[str, Any] | None = None
    trained: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    roles: dict[str, Any] | None = None
    streamed: Streamed | None = None
    # Original head numbers per layer (a structurally pruned model's); None: 0, 1, ...
    head_ids: list[list[int]] | None = None

    def __post_init__(self) -> None:
        if self.heads is None:
            if self.patterns is None:
                raise ValueError("ViewData needs patterns or heads.")
            self.heads = [int(p.shape[0]) for p in self.patterns]
        if self.kv_heads is None:
            self.kv_heads = list(self.heads)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def head_numbers(self, layer: int) -> list[int]:
        """The numbers of ``layer``'s heads, in the order of its patterns."""
        if self.head_ids is not None:
            return list(self.head_ids[layer])
        return list(range(self.heads[layer]))

    @property
    def layers(self) -> int:
        return len(self.heads)

    def add_overlay(self, name: str, label: str, matrices: np.ndarray, about: str = "") -> None:
        """Another view of the same tokens: ``matrices [layer, query_pos, key_pos]``."""
        n = self.n
        if matrices.shape != (self.layers, n, n):
            raise ValueError(f"overlay {name!r} must be [layer, {n}, {n}], "
                             f"not {list(matrices.shape)}")
        self.overlays.append({"name": name, "label": label, "about": about, "per": "layer",
                              "values": np.asarray(matrices, dtype=np.float64)})

    def _packed_patterns(self, budget_bytes: int, mass: float) -> tuple[dict, dict]:
        if self.patterns is not None:
            stacked = np.concatenate(self.patterns, axis=0)  # [layer * head, query, key]
            return pack_matrices(stacked, budget_bytes, mass, self.causal), pack_thumbnails(
                thumbnails(stacked))
        if self.streamed is None:
            raise ValueError("ViewData has neither patterns nor their reduction.")
        return (pack_sparse(self.streamed.candidates, budget_bytes, mass, self.causal),
                pack_thumbnails(self.streamed.thumbs))

    def payload(self, budget_bytes: int = DEFAULT_BUDGET, mass: float = KEEP_MASS
                ) -> dict[str, Any]:
        """The page's data (format in the module docstring); overlays take a quarter of
        ``budget_bytes``, shared equally."""
        overlay_budget = budget_bytes // 4 if self.overlays else 0
        patterns, thumbs = self._packed_patterns(budget_bytes - overlay_budget, mass)
        overlays = []
        for o in self.overlays:
            values = o["values"].astype(np.float32)
            overlays.append({k: v for k, v in o.items() if k != "values"} | {
                "matrices": pack_matrices(values, overlay_budget // len(self.overlays), mass,
                                          self.causal),
                "thumbs": pack_thumbnails(thumbnails(values))})
        return {
            "kind": "viewer", "version": 2, "model": self.model, "text": self.text,
            "tokens": list(self.tokens), "pieces": self.pieces, "n": self.n,
            "layers": self.layers, "heads": list(self.heads), "kv_heads": list(self.kv_heads),
            "head_ids": [self.head_numbers(layer) for layer in range(self.layers)],
            "causal": bool(self.causal), "prompt_length": self.prompt_length,
            "generation": self.generation, "trained": self.trained,
            "warnings": list(self.warnings), "roles": self.roles,
            "patterns": patterns, "thumbs": thumbs, "overlays": overlays,
        }


# Tokens and their text ------------------------------------------------------------------
def decoded_pieces(tokenizer, ids: list[int], start: int = 0) -> list[str | None]:
    """The text of tokens ``ids[start:]`` as decoding adds it (spaces included), each read
    in the context of the five tokens before it; None for special tokens."""
    special = tokenizer.special_ids
    hf = tokenizer.hf
    pieces: list[str | None] = []
    for j in range(start, len(ids)):
        if ids[j] in special:
            pieces.append(None)
            continue
        first = max(0, j - 5)
        context = [t for t in ids[first:j] if t not in special]
        before = hf.decode(context)  # the tokenizer's own clean-up: "sat ." -> "sat."
        both = hf.decode([*context, ids[j]])
        common = 0  # a partial UTF-8 byte decodes as "�" until its token's neighbour completes it
        while common < min(len(before), len(both)) and before[common] == both[common]:
            common += 1
        pieces.append(both[common:])
    return pieces


@dataclass
class Encoded:
    """One text (and pair) tokenised for the viewer."""

    inputs: dict[str, torch.Tensor]
    pieces: list[str | None]
    full_length: int  # tokens before truncation

    @property
    def ids(self) -> list[int]:
        return self.inputs["input_ids"][0].tolist()


def encode_text(tokenizer, text: str, pair: str | None, max_length: int) -> Encoded:
    """``text`` (and ``pair``) truncated to ``max_length`` tokens, with each token's piece of
    the text (from the fast tokenizer's offsets; by incremental decoding otherwise)."""
    hf = tokenizer.hf
    enc = hf(text, pair, truncation=True, max_length=max_length,
             return_offsets_mapping=bool(hf.is_fast))
    ids = list(enc["input_ids"])
    if not ids:
        from attnlens.errors import DataError

        raise DataError("the input has no tokens (the tokenizer gave none for this text: none "
                        "of its characters are in the vocabulary, and it adds no special "
                        "tokens); give a text the model's tokenizer covers.")
    inputs = {"input_ids": torch.tensor([ids]),
              "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if "token_type_ids" in enc:
        inputs["token_type_ids"] = torch.tensor([list(enc["token_type_ids"])])
    full = len(hf(text, pair, truncation=False, verbose=False)["input_ids"])
    if not hf.is_fast:
        return Encoded(inputs, decoded_pieces(tokenizer, ids), full)
    special = tokenizer.special_ids
    sources = (text, pair or "")
    ends = [0, 0]
    pieces: list[str | None] = []
    for token, (start, end), sequence in zip(ids, enc["offset_mapping"], enc.sequence_ids(),
                                            strict=True):
        if sequence is None or token in special:
            pieces.append(None)  # shown as a badge; one typed in the text is passed over
            if sequence is not None and end > start:
                ends[sequence] = max(ends[sequence], end)
            continue
        begin = ends[sequence]  # from the end of the previous token: its whitespace too
        end = max(end, begin)
        pieces.append(sources[sequence][begin:end])
        ends[sequence] = end
    return Encoded(inputs, pieces, full)


# Capture ----------------------------------------------------------------------------------
def model_heads(model) -> tuple[list[int], list[int]]:
    """(query heads, key/value heads) per layer."""
    cfg = model.cfg
    heads = list(getattr(model, "heads_per_layer", None) or cfg.heads_per_layer)
    kv = list(getattr(cfg, "kv_heads_per_layer", None) or heads)
    return heads, kv


@torch.no_grad()
def capture_attention(model, inputs: dict[str, torch.Tensor], budget_bytes: int,
                      keep_whole_bytes: int = KEEP_WHOLE_BYTES):
    """One forward pass: (output, patterns kept whole or None, Streamed or None).

    Each layer's pattern is handled inside its hook, so a long input never holds more than
    one layer's ``[head, query_pos, key_pos]`` beyond what the model itself does.
    """
    heads, _ = model_heads(model)
    n = int(inputs["input_ids"].shape[1])
    whole = sum(heads) * n * n * 4 <= keep_whole_bytes
    k = candidate_count(n, sum(heads) * n, budget_bytes)
    kept: dict[int, Any] = {}

    def take(pattern: torch.Tensor, hook) -> None:
        layer = int(hook.name.split(".")[1])
        weights = pattern[0].detach().float()  # [head, query_pos, key_pos], on its device
        kept[layer] = (weights.cpu().numpy().copy() if whole
                       else (row_candidates(weights, k), thumbnails(weights)))

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(len(heads))]
    inputs = {key: value.to(model.device) for key, value in inputs.items()}
    with _whole_patterns_up_to(model, n):
        output = model.run_with_hooks(**inputs, fwd_hooks=[(name, take) for name in names])
    layers = [kept[layer] for layer in range(len(heads))]
    if whole:
        return output, layers, None
    streamed = Streamed(RowCandidates.concat([c for c, _ in layers]),
                        np.concatenate([t for _, t in layers]))
    return output, None, streamed


@contextmanager
def _whole_patterns_up_to(model, n: int) -> Iterator[None]:
    """The viewer takes one layer's whole pattern at a time, by design (the page packs it
    layer by layer): lift the model's whole-matrix limit to ``n`` tokens for its forward."""
    blocks = getattr(model, "query_blocks", None)
    if blocks is None or n <= blocks.whole_matrix_limit:
        yield
        return
    model.set_query_blocks(replace(blocks, whole_matrix_limit=n))
    try:
        yield
    finally:
        model.set_query_blocks(blocks)


def checkpoint_folder(model) -> Path | None:
    path = model.cfg.source.get("path")
    return Path(path) if path else None


def default_max_length(model) -> int:
    """The model's trained length (from its checkpoint's files), else ``FALLBACK_LENGTH``."""
    from attnlens.loaders.trained_length import trained_length

    folder = checkpoint_folder(model)
    found = trained_length(folder) if folder else None
    return found.tokens if found else FALLBACK_LENGTH


def length_notes(data: ViewData, model, full_length: int, max_length: int) -> None:
    """The trained length on the page, and warnings when the input is longer or was cut."""
    from attnlens.loaders.trained_length import trained_length

    folder = checkpoint_folder(model)
    found = trained_length(folder) if folder else None
    if found is not None:
        data.trained = {"tokens": found.tokens, "source": found.source}
        if data.n > found.tokens:
            data.warnings.append(
                f"the input has {data.n} tokens, more than the {found.tokens} this model was "
                f"trained on ({found.source}): attention past position {found.tokens - 1} "
                "comes from positions the model never learned and may show artefacts.")
    if full_length > max_length and data.prompt_length is None:
        data.warnings.append(f"the text has {full_length} tokens; only the first {max_length} "
                             "are shown (--max-length).")


def view_data(model, tokenizer, encoded: Encoded, text: str, budget_bytes: int,
              keep_whole_bytes: int = KEEP_WHOLE_BYTES) -> tuple[ViewData, Any]:
    """ViewData of an encoded input (and the model's output of that forward pass)."""
    output, patterns, streamed = capture_attention(model, encoded.inputs, budget_bytes,
                                                   keep_whole_bytes)
    heads, kv = model_heads(model)
    name = model.cfg.source.get("name") or model.cfg.source.get("path", "")
    data = ViewData(tokens=tokenizer.decode_tokens(encoded.ids), patterns=patterns,
                    model=str(name), text=text, pieces=encoded.pieces, heads=heads,
                    kv_heads=kv, causal=bool(model.cfg.causal), streamed=streamed,
                    head_ids=head_ids_of(model))
    return data, output


def text_attention(model, tokenizer, text: str, pair: str | None = None,
                   max_length: int | None = None, budget_bytes: int = DEFAULT_BUDGET,
                   keep_whole_bytes: int = KEEP_WHOLE_BYTES) -> ViewData:
    """Run ``model`` once on ``text`` (and ``pair``) and keep every head's attention.

    ``max_length`` None: the model's trained length (``default_max_length``).
    """
    max_length = default_max_length(model) if max_length is None else max_length
    encoded = encode_text(tokenizer, text, pair, max_length)
    shown = text if pair is None else f"{text} ‖ {pair}"
    data, _ = view_data(model, tokenizer, encoded, shown, budget_bytes, keep_whole_bytes)
    length_notes(data, model, encoded.full_length, max_length)
    return data


def rollout_overlay(data: ViewData) -> bool:
    """Add attention rollout (Abnar & Zuidema 2020) when the library provides it and the
    patterns are whole and at most ``ROLLOUT_MAX_TOKENS`` long (a note says so otherwise)."""
    try:
        from attnlens.measures.rollout.rollout import rollout_matrices
    except ImportError:
        return False
    if data.patterns is None or data.n > ROLLOUT_MAX_TOKENS:
        data.warnings.append(f"attention rollout is left out above {ROLLOUT_MAX_TOKENS} tokens "
                             "(it multiplies whole [n, n] matrices: n³ per layer).")
        return False
    rolled = rollout_matrices([torch.from_numpy(p) for p in data.patterns])
    data.add_overlay(
        "rollout", "Attention rollout", rolled.numpy(),
        about="Share of each input token in each position after the layer (Abnar & Zuidema "
              "2020): head-mean attention mixed half-and-half with the residual identity, "
              "multiplied through the layers.")
    return True
