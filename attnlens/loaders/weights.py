"""Reading checkpoint tensors with shape checks and an unused-weight check."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attnlens.errors import WeightMismatchError


class WeightReader:
    """Hands out a checkpoint's tensors by name and remembers which were used.

    ``prefix`` is stripped transparently: ``take("encoder.layer.0...")`` finds
    ``bert.encoder.layer.0...`` when the checkpoint was saved from a model with a head.
    """

    def __init__(
        self,
        tensors: dict[str, torch.Tensor],
        prefix: str = "",
        ignore: Iterable[str] = (),
    ) -> None:
        self.tensors = tensors
        self.prefix = prefix
        self.used: set[str] = set()
        self.ignored = {k for k in tensors if any(k.endswith(s) for s in ignore)}

    def has(self, name: str) -> bool:
        return self._key(name) in self.tensors

    def _key(self, name: str) -> str:
        if name in self.tensors:
            return name
        return self.prefix + name

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """The tensor ``name``; raises if it is absent or its shape is not ``shape``."""
        key = self._key(name)
        if key not in self.tensors:
            raise WeightMismatchError(
                f"checkpoint tensor {key!r} is missing (expected shape {tuple(shape)}); "
                "the checkpoint does not match its config.json."
            )
        tensor = self.tensors[key]
        if tuple(tensor.shape) != tuple(shape):
            raise WeightMismatchError(
                f"checkpoint tensor {key!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(shape)} from config.json."
            )
        if not tensor.is_floating_point():
            raise WeightMismatchError(
                f"checkpoint tensor {key!r} holds {str(tensor.dtype).removeprefix('torch.')} "
                "values; attnlens reads floating-point weights (float32, float16, bfloat16, "
                "float64) and does not dequantize: use the model's unquantized checkpoint."
            )
        self.used.add(key)
        return tensor

    def take_optional(self, name: str, shape: tuple[int, ...]) -> torch.Tensor | None:
        return self.take(name, shape) if self.has(name) else None

    def finish(self) -> None:
        """Raise if any tensor of the checkpoint was not consumed by the converter."""
        unused = sorted(set(self.tensors) - self.used - self.ignored)
        if unused:
            shown = ", ".join(unused[:5]) + (" ..." if len(unused) > 5 else "")
            raise WeightMismatchError(
                f"{len(unused)} checkpoint tensor(s) were not used by the converter: {shown}; "
                "the checkpoint holds parts attnlens does not model."
            )


def linear_to_heads(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """nn.Linear weight ``[n_heads * d_head, d_in]`` -> per-head ``[head, d_in, d_head]``."""
    out_features, d_in = weight.shape
    return weight.reshape(n_heads, out_features // n_heads, d_in).transpose(1, 2).contiguous()


def heads_to_linear(W: torch.Tensor) -> torch.Tensor:
    """Per-head ``[head, d_in, d_head]`` -> nn.Linear weight ``[head * d_head, d_in]``."""
    return W.transpose(1, 2).reshape(-1, W.shape[1]).contiguous()


def out_linear_to_heads(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Output nn.Linear weight ``[d_out, n_heads * d_head_v]`` -> ``[head, d_head_v, d_out]``."""
    d_out, total = weight.shape
    return weight.T.reshape(n_heads, total // n_heads, d_out).contiguous()


def heads_to_out_linear(W_O: torch.Tensor) -> torch.Tensor:
    """Per-head ``[head, d_head_v, d_out]`` -> nn.Linear weight ``[d_out, head * d_head_v]``."""
    return W_O.reshape(-1, W_O.shape[-1]).T.contiguous()
