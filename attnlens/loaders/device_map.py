"""Models larger than one device: blocks spread over GPUs, CPU memory and disk (accelerate).

``dispatch(model, "auto", max_memory)`` asks accelerate for a device map that keeps every
``TransformerBlock`` whole (``infer_auto_device_map``), then attaches its hooks
(``dispatch_model``): each block runs where its weights are and its inputs are moved there,
so the forward pass, attnlens' hook points and every analyzer that reads activations work
unchanged, on the same numbers. Weights mapped to ``"cpu"`` beside a GPU are kept in CPU
memory and copied to the GPU for their block's forward; weights mapped to ``"disk"`` are
written to ``offload_dir`` and read back for their block's forward.

Analyses that read the weights themselves (QK/OV circuits, weight asymmetry, the collapse
variants) need every weight in memory: the command line therefore maps to GPUs and CPU
memory only, and refuses a model that does not fit there; disk offload is for the Python
API (``dispatch(..., max_memory={..., "disk": ...})``), where only activation-based analyzers
run. Needs the optional extra: ``pip install 'attnlens[accelerate]'``.
"""

from __future__ import annotations

import importlib.util
import tempfile
from typing import TYPE_CHECKING

from attnlens.errors import ConfigError

if TYPE_CHECKING:  # this module stays light: the command line checks options with it
    from attnlens.model.transformer import HookedTransformer

NO_SPLIT = ["TransformerBlock"]


def _accelerate():
    try:
        import accelerate
    except ImportError as exc:
        raise ConfigError(
            "--device-map needs accelerate: pip install 'attnlens[accelerate]'."
        ) from exc
    return accelerate


def check_device_map(device_map: str | None, max_memory: str | None) -> None:
    """Refuse bad --device-map / --max-memory values (and a missing accelerate) up front."""
    if device_map is None:
        if max_memory:
            raise ConfigError("--max-memory needs --device-map auto.")
        return
    if device_map != "auto":
        raise ConfigError(f"--device-map {device_map!r}: only 'auto' is supported.")
    if importlib.util.find_spec("accelerate") is None:
        raise ConfigError("--device-map needs accelerate: pip install 'attnlens[accelerate]'.")
    parse_max_memory(max_memory)


def parse_max_memory(spec: str | None) -> dict[int | str, str] | None:
    """``"0=20GiB,1=20GiB,cpu=60GiB"`` -> ``{0: "20GiB", 1: "20GiB", "cpu": "60GiB"}``."""
    if not spec:
        return None
    out: dict[int | str, str] = {}
    for part in spec.split(","):
        device, sep, amount = part.partition("=")
        device, amount = device.strip(), amount.strip()
        if not sep or not device or not amount:
            raise ConfigError(f"--max-memory entry {part!r} is not DEVICE=AMOUNT (0=20GiB).")
        out[int(device) if device.isdigit() else device] = amount
    return out


def plan(model: HookedTransformer, max_memory: dict | None = None) -> dict[str, int | str]:
    """accelerate's device map for ``model`` (blocks whole) under ``max_memory``."""
    accelerate = _accelerate()
    return dict(accelerate.infer_auto_device_map(model, max_memory=max_memory,
                                                 no_split_module_classes=NO_SPLIT))


def dispatch(
    model: HookedTransformer,
    device_map: str | dict = "auto",
    max_memory: dict | None = None,
    offload_dir: str | None = None,
    allow_disk: bool = True,
) -> HookedTransformer:
    """Spread ``model``'s modules over devices (module docstring); returns it, dispatched.

    ``device_map``: "auto" (from ``max_memory``) or an explicit ``{module name: device}``.
    The map is kept in ``model.hf_device_map``.
    """
    accelerate = _accelerate()
    if device_map == "auto":
        device_map = plan(model, max_memory)
    elif not isinstance(device_map, dict):
        raise ConfigError(f"device map {device_map!r} is neither 'auto' nor a mapping.")
    if "disk" in device_map.values():
        if not allow_disk:
            raise ConfigError(
                "the model does not fit in GPU and CPU memory; weight analyses need every "
                "weight in memory (raise --max-memory, or use the Python API's disk offload)."
            )
        offload_dir = offload_dir or tempfile.mkdtemp(prefix="attnlens-offload-")
    dispatched = accelerate.dispatch_model(model, device_map=device_map, offload_dir=offload_dir)
    dispatched.hf_device_map = device_map
    return dispatched
