"""Device and dtype resolution with clear errors.

``check_device_name`` and ``check_dtype_name`` need no torch (the command line calls them
before anything heavy is imported); ``resolve_device`` / ``resolve_dtype`` return torch objects.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from attnlens.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    import torch

# Accepted spellings -> torch dtype attribute names.
DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float64": "float64",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_name(device: str | None) -> None:
    """Refuse a device string torch would not understand (availability is checked later)."""
    if device is not None and not _DEVICE_RE.match(str(device)):
        raise DeviceError(f"unknown device {device!r}; use 'cpu', 'cuda', 'cuda:N' or 'auto'.")


def check_dtype_name(dtype: str | None) -> None:
    if dtype is not None and dtype not in DTYPE_NAMES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_NAMES)}.")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/"auto" -> CUDA when present, else CPU; "cuda" without a GPU is an error."""
    import torch

    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'.") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"device {device!r} was requested but no CUDA GPU is available; use --device cpu."
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(
            f"device {device!r} does not exist: {torch.cuda.device_count()} GPU(s) present."
        )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("device 'mps' was requested but is not available; use --device cpu.")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    check_dtype_name(dtype)
    return getattr(torch, DTYPE_NAMES[dtype])
