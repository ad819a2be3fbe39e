"""The converter registry: HF ``model_type`` -> one pure converter function (and its inverse).

The parity each reaches with Hugging Face is measured, not recorded here: ``loaders.verify``
(`attnlens models --verify`, and the parity tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders import bart, bert, distilbert, gpt2, llama, marian, roberta, t5
from attnlens.loaders.weights import WeightReader
from attnlens.model.config import TransformerConfig

ConvertFn = Callable[[dict, WeightReader, str], tuple[TransformerConfig, dict]]
# (attnlens config, attnlens state dict) -> (config.json fields, checkpoint tensors).
ExportFn = Callable[[TransformerConfig, dict], tuple[dict, dict]]


@dataclass(frozen=True)
class Converter:
    """How one HF model family becomes a HookedTransformer (and goes back)."""

    convert: ConvertFn
    # HF architecture class name -> attnlens output head (None: encoder only).
    architectures: dict[str, str | None]
    # Prefix of the base model's weights inside checkpoints saved with a head.
    prefix: str
    # Checkpoint tensors that are buffers, not weights (safe to leave unused).
    ignore: tuple[str, ...] = ()
    # The inverse converter used by ``attnlens.loaders.export.export_hf``.
    export: ExportFn | None = None
    # Name shown by `attnlens models`.
    family: str = ""


def _llama_style(model_type: str, name: str) -> Converter:
    family = llama.FAMILIES[model_type]
    return Converter(
        convert=llama.make_converter(family),
        architectures=llama.head_by_architecture(family),
        prefix="model.",
        ignore=("rotary_emb.inv_freq",),
        export=llama.make_exporter(family),
        family=name,
    )


CONVERTERS: dict[str, Converter] = {
    "bert": Converter(
        convert=bert.BERT.convert,
        architectures=bert.BERT.head_by_architecture,
        prefix="bert.",
        ignore=("position_ids",),
        export=bert.BERT.export,
        family="BERT (MiniLM)",
    ),
    "roberta": Converter(
        convert=roberta.ROBERTA.convert,
        architectures=roberta.ROBERTA.head_by_architecture,
        prefix="roberta.",
        ignore=("position_ids",),
        export=roberta.ROBERTA.export,
        family="RoBERTa",
    ),
    "distilbert": Converter(
        convert=distilbert.convert_distilbert,
        architectures=distilbert.HEAD_BY_ARCHITECTURE,
        prefix="distilbert.",
        ignore=("position_ids",),
        export=distilbert.export_distilbert,
        family="DistilBERT",
    ),
    "gpt2": Converter(
        convert=gpt2.convert_gpt2,
        architectures=gpt2.HEAD_BY_ARCHITECTURE,
        prefix="transformer.",
        ignore=gpt2.IGNORED,
        export=gpt2.export_gpt2,
        family="GPT-2",
    ),
    "llama": _llama_style("llama", "Llama"),
    "mistral": _llama_style("mistral", "Mistral"),
    "qwen2": _llama_style("qwen2", "Qwen2"),
    "bart": Converter(
        convert=bart.convert_bart,
        architectures=bart.HEAD_BY_ARCHITECTURE,
        prefix="model.",
        export=bart.export_bart,
        family="BART (encoder-decoder)",
    ),
    "marian": Converter(
        convert=marian.convert_marian,
        architectures=marian.HEAD_BY_ARCHITECTURE,
        prefix="model.",
        export=marian.export_marian,
        family="Marian (encoder-decoder)",
    ),
    "t5": Converter(
        convert=t5.convert_t5,
        architectures=t5.HEAD_BY_ARCHITECTURE,
        prefix="",
        ignore=t5.IGNORED,
        export=t5.export_t5,
        family="T5 v1.0/v1.1 (encoder-decoder)",
    ),
}


def supported_architectures() -> list[str]:
    return sorted(arch for conv in CONVERTERS.values() for arch in conv.architectures)


def find_converter(hf: dict) -> tuple[Converter, str]:
    """The converter and architecture name for a checkpoint's config.json."""
    model_type = hf.get("model_type")
    architectures = hf.get("architectures") or []
    converter = CONVERTERS.get(model_type)
    if converter is None:
        raise UnsupportedArchitectureError(
            f"model_type {model_type!r} is not supported; supported architectures: "
            f"{', '.join(supported_architectures())}."
        )
    known = [a for a in architectures if a in converter.architectures]
    if architectures and not known:
        raise UnsupportedArchitectureError(
            f"architecture {architectures[0]!r} is not supported; supported architectures: "
            f"{', '.join(supported_architectures())}."
        )
    # No "architectures" field: treat as the bare base model of the family.
    return converter, known[0] if known else next(iter(converter.architectures))
