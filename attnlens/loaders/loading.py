"""``load`` and ``load_model``: a Hugging Face checkpoint as an attnlens model (and tokenizer).

Two backends (``BACKENDS``): ``native`` converts the checkpoint into attnlens' own
``HookedTransformer`` (one converter per family: SDPA fast path, structural pruning with export,
the rank-collapse variants); ``hf`` runs the Hugging Face model itself with attnlens'
attention function registered on transformers' attention interface (any architecture whose
attention goes through it). ``auto`` takes the native converter when one exists and accepts
the config, else ``hf``; why native was not taken is kept in ``model.cfg.source``.
"""

from __future__ import annotations

import os

import torch

from attnlens.data.tokenizer import Tokenizer
from attnlens.device import resolve_device, resolve_dtype
from attnlens.errors import ConfigError, ModelLoadError, UnsupportedArchitectureError
from attnlens.loaders.backends import check_backend
from attnlens.loaders.checkpoint import (
    check_weight_files,
    read_config,
    read_weights,
    resolve_checkpoint,
)
from attnlens.loaders.config_checks import check_config
from attnlens.loaders.pruned_heads import (
    apply_pruned_heads,
    check_pruned_heads,
    refuse_pruned_heads_on_hf,
)
from attnlens.loaders.registry import find_converter
from attnlens.loaders.weights import WeightReader
from attnlens.model.empty import empty_modules
from attnlens.model.encoder_decoder import build_model
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer

__all__ = ["load", "load_model"]


def load_model(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype | None = torch.float32,
    allow_pickle: bool = False,
    backend: str = "auto",
) -> HookedTransformer:
    """Load a checkpoint as an attnlens model (eval mode) without its tokenizer.

    ``backend``: "native" (a ``HookedTransformer``; encoder-decoder checkpoints become an
    ``EncoderDecoderTransformer``), "hf" (an ``HFAttentionModel``) or "auto" (module docstring).
    """
    check_backend(backend)
    dev, dt = resolve_device(device), resolve_dtype(dtype)  # option errors before any reading
    path = resolve_checkpoint(name_or_path)
    hf = read_config(path)
    check_config(hf, str(path / "config.json"))  # either backend: the file itself is wrong
    name = str(name_or_path) if name_or_path is not None else "all-MiniLM-L6-v2 (embedded)"
    refused = None
    if backend != "hf":
        try:
            return _load_native(path, hf, name, dev, dt, allow_pickle)
        except (UnsupportedArchitectureError, ConfigError) as exc:
            if backend == "native":
                raise
            refused = str(exc)
    from attnlens.backends.hf.loading import check_model_type, load_hf_model

    check_model_type(hf)
    refuse_pruned_heads_on_hf(hf, str(path / "config.json"))  # before any weight is read
    use_safetensors = check_weight_files(path, allow_pickle)
    source = {"path": str(path), "name": name}
    if refused is not None:
        source["native_refused"] = refused
    return load_hf_model(path, source, dev, dt, use_safetensors).eval()


def _load_native(path, hf: dict, name: str, dev, dt, allow_pickle: bool) -> HookedTransformer:
    converter, architecture = find_converter(hf)
    check_pruned_heads(hf, str(path / "config.json"))  # before any weight is read
    tensors = read_weights(path, allow_pickle=allow_pickle)
    prefix = converter.prefix if any(k.startswith(converter.prefix) for k in tensors) else ""
    reader = WeightReader(tensors, prefix=prefix, ignore=converter.ignore)
    cfg, state = converter.convert(hf, reader, architecture)
    reader.finish()
    cfg.source.update({"path": str(path), "name": name, "architecture": architecture,
                       "backend": "native"})
    with empty_modules():  # weights assigned from the checkpoint below
        model = build_model(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    model.setup_hooks()
    if not has_several_attention_types(model):  # removed heads recorded by `prune --export`
        model = apply_pruned_heads(model, hf, str(path / "config.json"))
    return model.to(device=dev, dtype=dt).eval()


def load(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype | None = torch.float32,
    allow_pickle: bool = False,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    backend: str = "auto",
) -> tuple[HookedTransformer, Tokenizer]:
    """Load a checkpoint and its tokenizer: ``(HookedTransformer, Tokenizer)``.

    ``name_or_path``: None (the embedded all-MiniLM-L6-v2), a local folder with config.json
    and safetensors weights, or a hub id already in the local Hugging Face cache (attnlens
    never downloads). Pickle weights are refused unless ``allow_pickle=True`` (then read
    with ``torch.load(weights_only=True)``); ``trust_remote_code`` is never used. A folder
    without tokenizer files is an error: use ``load_model`` for the model alone.
    ``device_map="auto"`` (optional extra ``accelerate``) spreads the blocks over the GPUs and
    CPU memory within ``max_memory`` (``{0: "20GiB", "cpu": "60GiB"}``); see
    ``loaders.device_map``. ``backend``: "auto", "native" or "hf" (see ``load_model``).
    """
    check_backend(backend)
    model = load_model(name_or_path, "cpu" if device_map else device, dtype, allow_pickle,
                       backend)
    if device_map:  # blocks spread over GPUs and CPU memory (loaders.device_map)
        if getattr(model, "backend", "native") != "native":
            raise ConfigError("--device-map spreads attnlens' own (native) models; the hf "
                              "backend does not support it: drop --device-map.")
        from attnlens.loaders.device_map import dispatch

        model = dispatch(model, device_map, max_memory, allow_disk=False)
    tokenizer = Tokenizer.from_pretrained(model.cfg.source["path"])
    check_tokenizer_fits(tokenizer, model)
    model.tokenizer = tokenizer
    return model, tokenizer


def check_tokenizer_fits(tokenizer: Tokenizer, model: HookedTransformer) -> None:
    """Refuse a tokenizer that can give token ids past the model's embedding rows: the
    lookup would fail mid-run with an ``IndexError`` (a device-side assert on a GPU)."""
    cfg = model.cfg
    rows = cfg.encoder.vocab_size if hasattr(cfg, "encoder") else cfg.vocab_size
    vocab = tokenizer.hf.get_vocab()
    largest = max(vocab.values(), default=-1)
    if largest >= rows:
        beyond = sum(1 for i in vocab.values() if i >= rows)
        raise ModelLoadError(
            f"the tokenizer in {cfg.source.get('path')} gives token ids up to {largest}, but "
            f"the model has {rows} embedding rows (vocab_size in config.json): {beyond} "
            "token(s) would index past them; use the tokenizer saved with this model, or fix "
            "vocab_size."
        )
