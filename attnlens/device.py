"""Device and dtype resolution with clear errors."""

from __future__ import annotations

import torch

from attnlens.errors import ConfigError, DeviceError

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/"auto" -> CUDA when present, else CPU; "cuda" without a GPU is an error."""
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
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    return DTYPES[dtype]
