"""Export a HookedTransformer back to a Hugging Face folder (config.json + model.safetensors).

Each family's inverse converter (``Converter.export`` in the registry) maps attnlens' weights
back to the checkpoint's names; this module pads structurally pruned layers back to a uniform
head count, merges the config with the source checkpoint's one and writes the folder whole
(``attnlens.runs.outputs.OutputFolder``: never over the source model, never mixed with old files).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import torch

from attnlens.errors import ConfigError
from attnlens.loaders.checkpoint import TOKENIZER_FILES
from attnlens.loaders.registry import CONVERTERS
from attnlens.model.config import TransformerConfig
from attnlens.model.empty import empty_modules
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer
from attnlens.runs.io import atomic_write_json

# Source config.json fields not carried over (transformers writes its own). A legacy
# rope_scaling would take precedence over the rope_parameters the exporter writes.
_DROP_FROM_SOURCE = ("_name_or_path", "transformers_version", "torch_dtype", "rope_scaling")


def _place_heads(W: torch.Tensor, slots: list[int], n: int) -> torch.Tensor:
    """Heads ``W [head, ...]`` placed at ``slots`` of ``n`` heads, zeros elsewhere."""
    out = W.new_zeros(n, *W.shape[1:])
    out[torch.tensor(slots, dtype=torch.long, device=W.device)] = W
    return out


def removed_heads(model: HookedTransformer) -> dict[str, list[int]]:
    """Hugging Face's ``pruned_heads``: ``{layer: [original numbers of removed heads]}``
    for the layers that lost heads (empty for an unpruned model)."""
    n_heads = model.cfg.n_heads
    found = {}
    for layer, kept in enumerate(getattr(model, "head_ids", None) or []):
        gone = sorted(set(range(n_heads)) - set(kept))
        if gone:
            found[str(layer)] = gone
    return found


def pad_heads_to_uniform(model: HookedTransformer) -> HookedTransformer:
    """A copy of ``model`` whose every layer has ``cfg.n_heads`` heads (``model`` if already so).

    Each kept head goes back to its original place (``model.head_ids``); removed heads come
    back as zero weights: a zero ``W_V``, ``b_V`` and ``W_O`` make each one's contribution
    exactly zero, so the padded model computes the same outputs. Hugging Face configs hold
    one head count per model, which is why export needs this for structurally pruned models.
    """
    cfg = model.cfg
    n_heads = max([cfg.n_heads, *model.heads_per_layer])
    n_kv = max([cfg.n_kv_heads, *(b.attn.n_kv_heads for b in model.blocks)])
    if all(
        b.attn.n_heads == n_heads and b.attn.n_kv_heads == n_kv for b in model.blocks
    ):
        return model
    group = n_heads // n_kv  # query heads per key/value head in the unpruned model
    new_cfg = copy.deepcopy(cfg)
    new_cfg.n_heads, new_cfg.n_kv_heads = n_heads, n_kv
    new_cfg.heads_per_layer = [n_heads] * cfg.n_layers
    new_cfg.kv_heads_per_layer = [n_kv] * cfg.n_layers
    new_cfg.head_ids = None
    state = dict(model.state_dict())
    for i, (block, slots) in enumerate(zip(model.blocks, model.head_ids, strict=True)):
        attn, prefix = block.attn, f"blocks.{i}.attn."
        kv_slots = sorted({h // group for h in slots})
        for name in ("W_Q", "b_Q", "W_O"):
            if getattr(attn, name) is not None:
                state[prefix + name] = _place_heads(getattr(attn, name).detach(), slots, n_heads)
        for name in ("W_K", "b_K", "W_V", "b_V"):
            if getattr(attn, name) is not None:
                state[prefix + name] = _place_heads(getattr(attn, name).detach(), kv_slots,
                                                    n_kv)
    with empty_modules():  # weights assigned from ``state`` below
        padded = HookedTransformer(new_cfg)
    padded.load_state_dict(state, strict=True, assign=True)
    padded.setup_hooks()
    return padded.to(device=model.device, dtype=model.dtype).eval()


def _source_config(cfg: TransformerConfig) -> dict:
    path = cfg.source.get("path")
    config_file = Path(path) / "config.json" if path else None
    if config_file is None or not config_file.is_file():
        return {}
    source = json.loads(config_file.read_text())
    return {k: v for k, v in source.items() if k not in _DROP_FROM_SOURCE}


def _check_exportable(cfg: TransformerConfig) -> None:
    removed = [s for s in ("use_skip", "use_mlp", "use_norm") if not getattr(cfg, s)]
    if removed:
        raise ConfigError(
            f"cannot export a model built with {', '.join(f'{s}=False' for s in removed)}: "
            "Hugging Face architectures always have skips, MLPs and norms."
        )


def _unshare(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors that share no memory (safetensors refuses shared storage)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        t = tensor.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out


def hf_state(model: HookedTransformer) -> tuple[dict, dict[str, torch.Tensor]]:
    """The Hugging Face config dict and tensors for ``model`` (heads padded when pruned)."""
    cfg = model.cfg
    _check_exportable(cfg)
    model_type = cfg.source.get("model_type")
    converter = CONVERTERS.get(model_type)
    if converter is None or converter.export is None:
        known = ", ".join(k for k, c in CONVERTERS.items() if c.export is not None)
        raise ConfigError(
            f"cannot export model_type {model_type!r} (cfg.source['model_type']); "
            f"export supports models loaded from: {known}."
        )
    # Encoder-decoder models are never structurally pruned: nothing to pad.
    uniform = model if has_several_attention_types(model) else pad_heads_to_uniform(model)
    state = {k: v.detach() for k, v in uniform.state_dict().items()}
    fields, tensors = converter.export(uniform.cfg, state)
    hf = _source_config(cfg)
    source_labels = hf.get("id2label") or {}
    hf.update(fields)
    if "id2label" in fields and len(source_labels) == len(fields["id2label"]):
        # Keep the checkpoint's own label names when the classifier still has its labels.
        hf["id2label"] = source_labels
        hf["label2id"] = {name: int(i) for i, name in source_labels.items()}
    hf["model_type"] = model_type
    hf["dtype"] = str(uniform.dtype).removeprefix("torch.")
    hf.pop("pruned_heads", None)  # the source's, if it was pruned: this model's replaces it
    if not has_several_attention_types(model) and removed_heads(model):
        # Hugging Face's historical field; transformers 5 ignores it and loads the padded
        # full-size model; attnlens loads the pruned one with the heads' original numbers.
        hf["pruned_heads"] = removed_heads(model)
    return hf, _unshare(tensors)


def _copy_tokenizer_files(source: str | None, out_dir: Path) -> list[Path]:
    if not source or not Path(source).is_dir():
        return []
    copied = []
    for name in TOKENIZER_FILES:
        src = Path(source) / name
        if src.is_file():
            shutil.copyfile(src, out_dir / name)  # out_dir is the unpublished work folder
            copied.append(out_dir / name)
    return copied


def export_hf(
    model: HookedTransformer, out_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write ``model`` as a Hugging Face folder that ``transformers`` loads; return the folder.

    Writes ``config.json`` (the source checkpoint's config with the structural fields
    replaced), ``model.safetensors`` and, when the source checkpoint has them, its tokenizer
    files. Structurally pruned layers are padded back to ``cfg.n_heads`` heads, the kept ones
    at their original places and zero heads for the removed ones (``pad_heads_to_uniform``),
    so transformers loads a full-size model that computes the same outputs; ``config.json``
    records the removed heads in ``pruned_heads`` (``{layer: [head numbers]}``), from which
    ``attnlens.load`` rebuilds the pruned model with its heads' original numbers.

    The folder must be new or empty unless ``overwrite``, which replaces it as a whole (so
    no file of an older checkpoint, such as a shard index, survives beside the new one);
    the source model's own folder, or one holding it, is refused in every case. The files
    are written in a sibling folder renamed into place at the end: complete or absent.
    """
    from safetensors.torch import save_file

    from attnlens.runs.outputs import OutputFolder

    source = model.cfg.source.get("path")
    folder = OutputFolder(out_dir, force=overwrite, option="export folder",
                          protected=[("the source model", source)] if source else [])
    folder.check()
    hf, tensors = hf_state(model)
    with folder.writing() as work:
        save_file(tensors, work / "model.safetensors", metadata={"format": "pt"})
        atomic_write_json(work / "config.json", hf)
        _copy_tokenizer_files(source, work)
    return Path(out_dir)
