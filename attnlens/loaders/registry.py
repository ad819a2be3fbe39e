"""The converter registry: HF ``model_type`` -> one pure converter function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders.bert import HEAD_BY_ARCHITECTURE as BERT_ARCHITECTURES
from attnlens.loaders.bert import convert_bert
from attnlens.loaders.weights import WeightReader
from attnlens.model.config import TransformerConfig

ConvertFn = Callable[[dict, WeightReader, str], tuple[TransformerConfig, dict]]


@dataclass(frozen=True)
class Converter:
    """How one HF model family becomes a HookedTransformer."""

    convert: ConvertFn
    # HF architecture class name -> attnlens output head (None: encoder only).
    architectures: dict[str, str | None]
    # Prefix of the base model's weights inside checkpoints saved with a head.
    prefix: str
    # Checkpoint tensors that are buffers, not weights (safe to leave unused).
    ignore: tuple[str, ...] = ()
    # Parity tolerance reached in tests/test_parity_*.py (max abs difference, fp32).
    parity: str = "1e-5"


CONVERTERS: dict[str, Converter] = {
    "bert": Converter(
        convert=convert_bert,
        architectures=BERT_ARCHITECTURES,
        prefix="bert.",
        ignore=("position_ids",),
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
