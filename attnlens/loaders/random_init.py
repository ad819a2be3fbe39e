"""A randomly re-initialised copy of a model: the null model a report's findings are held to.

``random_init_copy(model, seed)`` returns a model of the same architecture, config and
tokenizer whose weights were never trained:

- **transformers' own initialisation** (the default, whenever the model was loaded from a
  checkpoint of an architecture transformers has): the checkpoint's ``config.json`` builds
  the Hugging Face class named there (``BertModel``, ``GPT2LMHeadModel``, ...) under
  ``torch.manual_seed(seed)``, so its ``post_init`` runs the architecture's ``_init_weights``
  (BERT and GPT-2: normal(0, ``initializer_range``) for matrices and embeddings, zero
  biases, unit norm scales; Llama: the same with its own range); that state dict goes
  through the same converter as a checkpoint's (a model on the hf backend: the same class
  built the same way and run by the hf backend, no conversion);
- **attnlens' reset** (models built in code, without a checkpoint folder): every matrix and
  embedding normal(0, 0.02), every bias 0, every norm scale 1 (GPT-2's and BERT's scheme).

``describe`` in the result names which one ran, for ``run.json`` and the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from attnlens.loaders import bert_init
from attnlens.loaders.checkpoint import read_config
from attnlens.loaders.registry import find_converter
from attnlens.loaders.weights import WeightReader
from attnlens.model.empty import empty_modules
from attnlens.model.encoder_decoder import build_model

RESET_STD = 0.02


@dataclass
class NullModel:
    """The re-initialised model and how it was initialised (one sentence)."""

    model: torch.nn.Module
    describe: str
    initialisation: str  # "transformers" or "attnlens reset"


def random_init_copy(model, seed: int = 0) -> NullModel:
    """A randomly initialised copy of ``model`` (module docstring), on its device and dtype."""
    source = dict(getattr(model.cfg, "source", {}) or {})
    path, architecture = source.get("path"), source.get("architecture")
    if source.get("backend") == "hf":  # the Hugging Face model itself, not a conversion
        from attnlens.backends.hf.loading import random_init_model

        null = random_init_model(model, seed)
        null.cfg.source["null"] = f"random-init seed {seed}"
        describe = (f"{architecture} initialised by transformers' own _init_weights (seed "
                    f"{seed}), run by the hf backend like the checkpoint")
        return NullModel(null, describe, "transformers")
    if path and architecture and (Path(path) / "config.json").is_file():
        null = _from_transformers(Path(path), architecture, seed)
        if null is not None:
            null.model = null.model.to(device=model.device, dtype=model.dtype).eval()
            null.model.cfg.source.update({**source, "null": f"random-init seed {seed}"})
            return null
    return _reset(model, seed)


def _from_transformers(path: Path, architecture: str, seed: int) -> NullModel | None:
    """The architecture's own initialisation, or None when transformers lacks the class."""
    hf = read_config(path)
    converter, chosen = find_converter(hf)
    config = bert_init.config_from_json(hf) if chosen in bert_init.ARCHITECTURES else None
    if config is not None and bert_init.covers(chosen, config):
        # the same draws, no transformers import (config.json read as BertConfig reads it)
        tensors = bert_init.bert_state_dict(config, seed)
        how = f"transformers' _init_weights reproduced draw for draw (seed {seed})"
    else:
        import transformers

        config = (transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
                  if chosen in bert_init.ARCHITECTURES else None)
        if config is not None and bert_init.covers(chosen, config):
            tensors = bert_init.bert_state_dict(config, seed)
            how = f"transformers' _init_weights reproduced draw for draw (seed {seed})"
            return _converted(path, hf, converter, chosen, tensors, how)
        hf_class = getattr(transformers, chosen, None)
        if hf_class is None:
            return None
        config = config or transformers.AutoConfig.from_pretrained(str(path),
                                                                   local_files_only=True)
        torch.manual_seed(seed)
        hf_model = hf_class(config)  # post_init() -> the architecture's _init_weights
        tensors = {k: v.detach() for k, v in hf_model.state_dict().items()}
        del hf_model
        how = f"transformers' own _init_weights (seed {seed})"
    return _converted(path, hf, converter, chosen, tensors, how)


def _converted(path: Path, hf: dict, converter, chosen: str, tensors: dict, how: str
               ) -> NullModel:
    """A Hugging Face state dict through the checkpoint's converter, as a ``NullModel``."""
    prefix = converter.prefix if any(k.startswith(converter.prefix) for k in tensors) else ""
    reader = WeightReader(tensors, prefix=prefix, ignore=converter.ignore)
    cfg, state = converter.convert(hf, reader, chosen)
    # transformers' own extra buffers (position ids) or tied copies may be left unread here;
    # unlike a checkpoint's, they are not the user's weights, so no reader.finish() check.
    cfg.source.update({"path": str(path), "architecture": chosen})
    with empty_modules():
        null = build_model(cfg)
    null.load_state_dict(state, strict=True, assign=True)
    null.setup_hooks()
    describe = f"{chosen} initialised by {how}, converted like the checkpoint"
    return NullModel(null, describe, "transformers")


@torch.no_grad()
def _reset(model, seed: int) -> NullModel:
    """attnlens' reset: a deep copy with normal(0, 0.02) matrices, zero biases, unit norms."""
    import copy

    null = copy.deepcopy(model)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    for name, param in null.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if param.dim() >= 2:
            fresh = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.copy_(fresh * RESET_STD)
        elif leaf.startswith("b") or "bias" in leaf:
            param.zero_()
        else:  # norm scales (w, weight of a LayerNorm / RMSNorm)
            param.fill_(1.0)
    source = getattr(null.cfg, "source", None)
    if isinstance(source, dict):
        source["null"] = f"random-init seed {seed}"
    describe = (f"attnlens reset (seed {seed}): matrices and embeddings normal(0, {RESET_STD}), "
                "biases 0, norm scales 1")
    return NullModel(null.eval(), describe, "attnlens reset")
