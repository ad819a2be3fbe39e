"""The numbers behind the attention viewer: one text's attention patterns, packed small.

Format of the page's data (also the place to add more views of the same tokens)::

    {"tokens": [...], "layers": L, "heads": [H_0, ..., H_{L-1}], "n": n,
     "patterns": PACKED,             # every head's [query_pos, key_pos] matrix, layer-major
     "overlays": [{"name": "rollout", "label": ..., "about": ..., "per": "layer",
                   "matrices": PACKED}]}   # one [query_pos, key_pos] matrix per layer

    PACKED = {"format": "dense", "count": m, "n": n, "bits": 16 | 8, "data": base64}
           | {"format": "topk",  "count": m, "n": n, "k": k, "index": base64, "value": base64}

``dense`` holds every weight quantised to ``bits`` (value = code / (2**bits - 1)); ``topk``
holds each row's ``k`` largest weights (uint16 key positions, uint16 codes). Both little
endian. The packer picks the most precise form that fits ``budget_bytes``: 16-bit dense
for short texts, top-k rows for long ones (a 512-token MiniLM text keeps ~40 keys per row).
An overlay is any extra stack of [query_pos, key_pos] matrices per layer; attention rollout
is added when ``attnlens.measures.rollout.rollout`` is installed (``rollout_overlay``), and
``ViewData.add_overlay`` adds others.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

DEFAULT_BUDGET = 6_000_000  # bytes of packed weights before base64


def pack_matrices(matrices: np.ndarray, budget_bytes: int = DEFAULT_BUDGET) -> dict[str, Any]:
    """``matrices [count, n, n]`` (rows of weights in [0, 1]) packed as described above."""
    count, n, _ = matrices.shape
    values = np.clip(np.nan_to_num(matrices, nan=0.0), 0.0, 1.0)
    for bits, dtype in ((16, np.uint16), (8, np.uint8)):
        if count * n * n * np.dtype(dtype).itemsize <= budget_bytes:
            codes = np.rint(values * (2**bits - 1)).astype(dtype)
            return {"format": "dense", "count": count, "n": n, "bits": bits,
                    "data": base64.b64encode(codes.astype(f"<u{bits // 8}").tobytes()).decode()}
    k = int(max(1, min(n, budget_bytes // max(1, count * n * 4))))
    order = np.argsort(-values, axis=-1, kind="stable")[..., :k]  # [count, query_pos, k]
    top = np.take_along_axis(values, order, axis=-1)
    codes = np.rint(top * 65535).astype("<u2")
    return {"format": "topk", "count": count, "n": n, "k": k,
            "index": base64.b64encode(order.astype("<u2").tobytes()).decode(),
            "value": base64.b64encode(codes.tobytes()).decode()}


def unpack_matrices(packed: dict[str, Any]) -> np.ndarray:
    """Inverse of ``pack_matrices`` (dropped top-k entries come back as 0)."""
    count, n = packed["count"], packed["n"]
    if packed["format"] == "dense":
        dtype = "<u2" if packed["bits"] == 16 else "<u1"
        codes = np.frombuffer(base64.b64decode(packed["data"]), dtype=dtype)
        return codes.reshape(count, n, n).astype(np.float64) / (2 ** packed["bits"] - 1)
    k = packed["k"]
    index = np.frombuffer(base64.b64decode(packed["index"]), dtype="<u2").reshape(count, n, k)
    value = np.frombuffer(base64.b64decode(packed["value"]), dtype="<u2").reshape(count, n, k)
    out = np.zeros((count, n, n))
    np.put_along_axis(out, index.astype(np.int64), value / 65535, axis=-1)
    return out


def display_token(token: str) -> str:
    """A token as people read it: byte-level BPE's space marks dropped (Ġ, ▁)."""
    shown = token.replace("Ġ", "").replace("▁", "").replace("Ċ", "\\n")
    return shown if shown else token


@dataclass
class ViewData:
    """One text's tokens and attention patterns (per layer ``[head, query_pos, key_pos]``)."""

    tokens: list[str]
    patterns: list[np.ndarray]
    model: str = ""
    text: str = ""
    overlays: list[dict[str, Any]] = field(default_factory=list)

    def add_overlay(self, name: str, label: str, matrices: np.ndarray, about: str = "") -> None:
        """Another view of the same tokens: ``matrices [layer, query_pos, key_pos]``."""
        n = len(self.tokens)
        if matrices.shape != (len(self.patterns), n, n):
            raise ValueError(f"overlay {name!r} must be [layer, {n}, {n}], "
                             f"not {list(matrices.shape)}")
        self.overlays.append({"name": name, "label": label, "about": about, "per": "layer",
                              "values": np.asarray(matrices, dtype=np.float64)})

    def payload(self, budget_bytes: int = DEFAULT_BUDGET) -> dict[str, Any]:
        stacked = np.concatenate(self.patterns, axis=0)  # [layer * head, query_pos, key_pos]
        overlay_budget = budget_bytes // 4 if self.overlays else 0
        return {
            "kind": "viewer",
            "model": self.model,
            "text": self.text,
            "tokens": [display_token(t) for t in self.tokens],
            "raw_tokens": list(self.tokens),
            "n": len(self.tokens),
            "layers": len(self.patterns),
            "heads": [int(p.shape[0]) for p in self.patterns],
            "patterns": pack_matrices(stacked, budget_bytes - overlay_budget),
            "overlays": [
                {k: v for k, v in o.items() if k != "values"}
                | {"matrices": pack_matrices(o["values"], overlay_budget // len(self.overlays))}
                for o in self.overlays
            ],
        }


@torch.no_grad()
def text_attention(model, tokenizer, text: str, pair: str | None = None,
                   max_length: int = 512) -> ViewData:
    """Run ``model`` once on ``text`` (and ``pair``) and keep every head's pattern."""
    inputs = tokenizer([text], max_length=max_length,
                       pairs=[pair] if pair is not None else None)
    inputs = {k: v.to(model.device) for k, v in inputs.items()}
    _, cache = model.run_with_cache(**inputs, names_filter=lambda n: n.endswith("hook_pattern"))
    real = int(inputs["attention_mask"][0].sum())
    patterns = [
        cache[f"blocks.{layer}.attn.hook_pattern"][0, :, :real, :real].float().cpu().numpy()
        for layer in range(model.cfg.n_layers)
    ]  # per layer [head, query_pos, key_pos]
    tokens = tokenizer.decode_tokens(inputs["input_ids"][0, :real].tolist())
    name = model.cfg.source.get("name") or model.cfg.source.get("path", "")
    shown = text if pair is None else f"{text} ‖ {pair}"
    return ViewData(tokens=tokens, patterns=patterns, model=str(name), text=shown)


def rollout_overlay(data: ViewData) -> bool:
    """Add attention rollout (Abnar & Zuidema 2020) when the library provides it."""
    try:
        from attnlens.measures.rollout.rollout import rollout_matrices
    except ImportError:
        return False
    rolled = rollout_matrices([torch.from_numpy(p) for p in data.patterns])
    data.add_overlay(
        "rollout", "Attention rollout", rolled.numpy(),
        about="Share of each input token in each position after the layer (Abnar & Zuidema "
              "2020): head-mean attention mixed half-and-half with the residual identity, "
              "multiplied through the layers.")
    return True
