"""``load`` and ``load_model``: a Hugging Face checkpoint as a HookedTransformer (and tokenizer)."""

from __future__ import annotations

import os

import torch

from attnlens.data.tokenizer import Tokenizer
from attnlens.device import resolve_device, resolve_dtype
from attnlens.errors import ModelLoadError
from attnlens.loaders.checkpoint import read_config, read_weights, resolve_checkpoint
from attnlens.loaders.config_checks import check_config
from attnlens.loaders.pruned_heads import apply_pruned_heads, check_pruned_heads
from attnlens.loaders.registry import find_converter
from attnlens.loaders.weights import WeightReader
from attnlens.model.empty import empty_modules
from attnlens.model.encoder_decoder import build_model, is_encoder_decoder
from attnlens.model.transformer import HookedTransformer

__all__ = ["load", "load_model"]


def load_model(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype | None = torch.float32,
    allow_pickle: bool = False,
) -> HookedTransformer:
    """Convert a checkpoint into a HookedTransformer (eval mode) without its tokenizer.

    Encoder-decoder checkpoints (BART, Marian, T5) become an ``EncoderDecoderTransformer``.
    """
    dev, dt = resolve_device(device), resolve_dtype(dtype)  # option errors before any reading
    path = resolve_checkpoint(name_or_path)
    hf = read_config(path)
    check_config(hf, str(path / "config.json"))
    converter, architecture = find_converter(hf)
    check_pruned_heads(hf, str(path / "config.json"))  # before any weight is read
    tensors = read_weights(path, allow_pickle=allow_pickle)
    prefix = converter.prefix if any(k.startswith(converter.prefix) for k in tensors) else ""
    reader = WeightReader(tensors, prefix=prefix, ignore=converter.ignore)
    cfg, state = converter.convert(hf, reader, architecture)
    reader.finish()
    name = str(name_or_path) if name_or_path is not None else "all-MiniLM-L6-v2 (embedded)"
    cfg.source.update({"path": str(path), "name": name, "architecture": architecture})
    with empty_modules():  # weights assigned from the checkpoint below
        model = build_model(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    model.setup_hooks()
    if not is_encoder_decoder(model):  # removed heads recorded by `prune --export`
        model = apply_pruned_heads(model, hf, str(path / "config.json"))
    return model.to(device=dev, dtype=dt).eval()


def load(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype | None = torch.float32,
    allow_pickle: bool = False,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
) -> tuple[HookedTransformer, Tokenizer]:
    """Load a checkpoint and its tokenizer: ``(HookedTransformer, Tokenizer)``.

    ``name_or_path``: None (the embedded all-MiniLM-L6-v2), a local folder with config.json
    and safetensors weights, or a hub id already in the local Hugging Face cache (attnlens
    never downloads). Pickle weights are refused unless ``allow_pickle=True`` (then read
    with ``torch.load(weights_only=True)``); ``trust_remote_code`` is never used. A folder
    without tokenizer files is an error: use ``load_model`` for the model alone.
    ``device_map="auto"`` (optional extra ``accelerate``) spreads the blocks over the GPUs and
    CPU memory within ``max_memory`` (``{0: "20GiB", "cpu": "60GiB"}``); see
    ``loaders.device_map``.
    """
    model = load_model(name_or_path, "cpu" if device_map else device, dtype, allow_pickle)
    if device_map:  # blocks spread over GPUs and CPU memory (loaders.device_map)
        from attnlens.loaders.device_map import dispatch

        model = dispatch(model, device_map, max_memory, allow_disk=False)
    tokenizer = Tokenizer.from_pretrained(model.cfg.source["path"])
    check_tokenizer_fits(tokenizer, model)
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
