"""The converter registry: HF ``model_type`` -> one pure converter function (and its inverse)."""

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
    # Largest absolute difference to HF eager (fp32) over attention probabilities, hidden
    # states and logits, measured by tests/test_parity_*.py (printed with pytest -s).
    parity: str = "1e-5"
    # The inverse converter used by ``attnlens.loaders.export.export_hf``.
    export: ExportFn | None = None
    # Name shown by `attnlens models`.
    family: str = ""


def _llama_style(model_type: str, name: str, parity: str) -> Converter:
    family = llama.FAMILIES[model_type]
    return Converter(
        convert=llama.make_converter(family),
        architectures=llama.head_by_architecture(family),
        prefix="model.",
        ignore=("rotary_emb.inv_freq",),
        parity=parity,
        export=llama.make_exporter(family),
        family=name,
    )


CONVERTERS: dict[str, Converter] = {
    "bert": Converter(
        convert=bert.convert_bert,
        architectures=bert.HEAD_BY_ARCHITECTURE,
        prefix="bert.",
        ignore=("position_ids",),
        parity="0 (tiny); MiniLM 0",
        export=bert.export_bert,
        family="BERT (MiniLM)",
    ),
    "roberta": Converter(
        convert=roberta.convert_roberta,
        architectures=roberta.HEAD_BY_ARCHITECTURE,
        prefix="roberta.",
        ignore=("position_ids",),
        parity="0",
        export=roberta.export_roberta,
        family="RoBERTa",
    ),
    "distilbert": Converter(
        convert=distilbert.convert_distilbert,
        architectures=distilbert.HEAD_BY_ARCHITECTURE,
        prefix="distilbert.",
        ignore=("position_ids",),
        parity="0",
        export=distilbert.export_distilbert,
        family="DistilBERT",
    ),
    "gpt2": Converter(
        convert=gpt2.convert_gpt2,
        architectures=gpt2.HEAD_BY_ARCHITECTURE,
        prefix="transformer.",
        ignore=gpt2.IGNORED,
        parity="1.55e-06",
        export=gpt2.export_gpt2,
        family="GPT-2",
    ),
    "llama": _llama_style("llama", "Llama", "2.53e-06"),
    "mistral": _llama_style("mistral", "Mistral", "2.53e-06"),
    "qwen2": _llama_style("qwen2", "Qwen2", "2.71e-06"),
    "bart": Converter(
        convert=bart.convert_bart,
        architectures=bart.HEAD_BY_ARCHITECTURE,
        prefix="model.",
        parity="0 (tiny)",
        export=bart.export_bart,
        family="BART (encoder-decoder)",
    ),
    "marian": Converter(
        convert=marian.convert_marian,
        architectures=marian.HEAD_BY_ARCHITECTURE,
        prefix="model.",
        parity="0 (tiny)",
        export=marian.export_marian,
        family="Marian (encoder-decoder)",
    ),
    "t5": Converter(
        convert=t5.convert_t5,
        architectures=t5.HEAD_BY_ARCHITECTURE,
        prefix="",
        ignore=t5.IGNORED,
        parity="0 (tiny)",
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
