"""Loading a checkpoint with transformers for the hf backend: offline, safe, any architecture.

The checkpoint's own architecture class (``config.architectures[0]``, else ``AutoModel``)
loads it with ``attn_implementation="attnlens"``: never ``trust_remote_code``, only local
files (a folder, or a hub id already in the local Hugging Face cache), safetensors unless
``allow_pickle`` (pickle weights are then read by transformers with ``weights_only=True``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnlens.backends.hf.attention import IMPLEMENTATION, register
from attnlens.backends.hf.model import HFAttentionModel
from attnlens.errors import ModelLoadError, UnsupportedArchitectureError


def model_class(config) -> tuple[type, str]:
    """The transformers class named by ``config.architectures`` (else AutoModel's choice)."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if isinstance(cls, type):
            return cls, name
    try:
        cls = transformers.AutoModel._model_mapping[type(config)]
    except KeyError as exc:
        raise UnsupportedArchitectureError(
            f"transformers has no model class for {type(config).__name__}; attnlens never "
            "runs a checkpoint's own code (trust_remote_code)."
        ) from exc
    return cls, cls.__name__


def check_model_type(hf: dict) -> None:
    """Refuse a config.json whose ``model_type`` the installed transformers does not know."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = hf.get("model_type")
    if model_type in CONFIG_MAPPING_NAMES:
        return
    own_code = " and names its own code (auto_map)" if hf.get("auto_map") else ""
    raise UnsupportedArchitectureError(
        f"model_type {model_type!r} has no native converter and is not known to transformers "
        f"{transformers.__version__}{own_code}; attnlens never runs a checkpoint's own code "
        "(trust_remote_code). What loads: `attnlens models` (native converters) and "
        "`attnlens models --verify --all` (the hf backend)."
    )


def read_config(path: Path):
    """The checkpoint's transformers config (local files only, no remote code)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    # A config class's own checks raise what they like (ValueError for an unknown model_type
    # or remote code, NotImplementedError for XLNet's max_position_embeddings, ...).
    except Exception as exc:  # transformers' config code, reported in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        remote = (" attnlens never runs a checkpoint's own code (trust_remote_code)."
                  if isinstance(exc, ValueError) else "")
        raise UnsupportedArchitectureError(
            f"transformers {__import__('transformers').__version__} cannot read the config "
            f"of {path} ({type(exc).__name__}: {first}); fix config.json or use a "
            f"checkpoint that transformers reads.{remote}"
        ) from exc


def load_hf_model(
    path: Path,
    source: dict,
    device: torch.device,
    dtype: torch.dtype,
    use_safetensors: bool = True,
) -> HFAttentionModel:
    """Load ``path`` (a local checkpoint folder whose weights files the caller checked).

    ``use_safetensors=False`` only when the caller allowed pickle weights.
    """
    from transformers.utils import logging as hf_logging

    register()
    config = read_config(path)
    cls, architecture = model_class(config)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # attnlens prints its own progress
    try:
        hf = cls.from_pretrained(
            path, attn_implementation=IMPLEMENTATION, local_files_only=True,
            trust_remote_code=False, use_safetensors=use_safetensors, dtype=dtype,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"transformers could not load {path} as {architecture}: {first}"
                             ) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    check_parameters(hf)
    source = {**source, "backend": "hf", "model_type": getattr(config, "model_type", ""),
              "architecture": architecture}
    return HFAttentionModel(hf.to(device), source)


def check_parameters(hf: torch.nn.Module) -> None:
    """Refuse NaN or infinite weights, naming the first parameter that holds one."""
    for name, tensor in hf.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ModelLoadError(
                f"checkpoint tensor {name!r} holds NaN or infinite values; the weights are "
                "damaged: re-export or re-download the model."
            )


def random_init_model(model: HFAttentionModel, seed: int) -> HFAttentionModel:
    """The same Hugging Face class and config, initialised by transformers under
    ``torch.manual_seed(seed)`` (``post_init`` runs the architecture's ``_init_weights``),
    run through attnlens' attention function: the null model of an hf-backed model."""
    register()
    torch.manual_seed(seed)
    fresh = type(model.hf)._from_config(model.hf.config, attn_implementation=IMPLEMENTATION)
    fresh = fresh.to(device=model.device, dtype=model.dtype).eval()
    return HFAttentionModel(fresh, dict(model.cfg.source)).eval()
