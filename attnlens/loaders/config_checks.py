"""config.json checked per family before a converter reads it: types, positivity, ranges,
divisibility, each message naming the field.

A converter reads its sizes straight from the HF config (``hf["num_attention_heads"]``); a
missing field was a ``KeyError``, ``"384"`` or ``384.0`` a ``TypeError`` deep in a reshape,
zero heads a ``ZeroDivisionError``, and 10^12 layers an allocation that failed as "out of
memory". ``check_config`` refuses each with one line naming the field and the fix. It runs
on the dict alone (no torch), so the command line calls it before the model loads
(``ModelOptions.check``), and ``loaders.loading.load_model`` calls it before the converter.

Upper bounds are far above any released model (Llama 3.1 405B: 126 layers, 16,384 wide,
128 heads, a 128k vocabulary) and low enough that no size product overflows int64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlens.errors import ModelLoadError

LAYERS, HEADS, WIDTH = 4096, 65536, 1 << 20
VOCAB, POSITIONS = 1 << 24, 1 << 28


@dataclass(frozen=True)
class Size:
    """An integer field of config.json: ``low..high``; optional fields may be absent or null."""

    name: str
    high: int
    low: int = 1
    required: bool = True


@dataclass(frozen=True)
class Positive:
    """An optional float field (epsilons, rope theta): finite and above 0 when given."""

    name: str


@dataclass(frozen=True)
class Family:
    fields: tuple[Size | Positive, ...]
    divisible: tuple[tuple[str, str], ...] = ()  # (width, heads): width % heads == 0
    # (width, heads, head width): the divisibility is needed only without the head width
    divisible_unless: tuple[tuple[str, str, str], ...] = ()


_BERT = Family(
    (Size("hidden_size", WIDTH), Size("num_hidden_layers", LAYERS),
     Size("num_attention_heads", HEADS), Size("intermediate_size", WIDTH),
     Size("vocab_size", VOCAB), Size("max_position_embeddings", POSITIONS),
     Size("type_vocab_size", VOCAB, low=0, required=False), Positive("layer_norm_eps")),
    divisible=(("hidden_size", "num_attention_heads"),),
)
_LLAMA = Family(
    (Size("hidden_size", WIDTH), Size("num_hidden_layers", LAYERS),
     Size("num_attention_heads", HEADS), Size("num_key_value_heads", HEADS, required=False),
     Size("head_dim", WIDTH, required=False), Size("intermediate_size", WIDTH),
     Size("vocab_size", VOCAB), Size("max_position_embeddings", POSITIONS, required=False),
     Positive("rms_norm_eps"), Positive("rope_theta")),
    divisible=(("num_attention_heads", "num_key_value_heads"),),
    divisible_unless=(("hidden_size", "num_attention_heads", "head_dim"),),
)
_SEQ2SEQ = Family(
    (Size("d_model", WIDTH), Size("encoder_layers", LAYERS), Size("decoder_layers", LAYERS),
     Size("encoder_attention_heads", HEADS), Size("decoder_attention_heads", HEADS),
     Size("encoder_ffn_dim", WIDTH), Size("decoder_ffn_dim", WIDTH), Size("vocab_size", VOCAB),
     Size("decoder_vocab_size", VOCAB, required=False),
     Size("max_position_embeddings", POSITIONS)),
    divisible=(("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads")),
)
FAMILIES: dict[str, Family] = {
    "bert": _BERT,
    "roberta": _BERT,
    "distilbert": Family(
        (Size("dim", WIDTH), Size("n_layers", LAYERS), Size("n_heads", HEADS),
         Size("hidden_dim", WIDTH), Size("vocab_size", VOCAB),
         Size("max_position_embeddings", POSITIONS)),
        divisible=(("dim", "n_heads"),),
    ),
    "gpt2": Family(
        (Size("n_embd", WIDTH), Size("n_layer", LAYERS), Size("n_head", HEADS),
         Size("n_inner", WIDTH, required=False), Size("vocab_size", VOCAB),
         Size("n_positions", POSITIONS, required=False), Positive("layer_norm_epsilon")),
        divisible=(("n_embd", "n_head"),),
    ),
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "bart": _SEQ2SEQ,
    "marian": _SEQ2SEQ,
    "t5": Family(
        (Size("d_model", WIDTH), Size("d_kv", WIDTH), Size("num_heads", HEADS),
         Size("num_layers", LAYERS), Size("num_decoder_layers", LAYERS, required=False),
         Size("d_ff", WIDTH), Size("vocab_size", VOCAB),
         Size("relative_attention_num_buckets", POSITIONS, required=False),
         Size("relative_attention_max_distance", POSITIONS, required=False),
         Positive("layer_norm_epsilon")),
    ),
}


def _integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_size(hf: dict, field: Size, where: str) -> None:
    value = hf.get(field.name)
    fix = "fix it in config.json, or re-save the model with transformers"
    if value is None:
        if field.required:
            state = "is null" if field.name in hf else "is missing"
            raise ModelLoadError(f"{where}: {field.name} {state}; it must be an integer from "
                                 f"{field.low} to {field.high}: {fix}.")
        return
    if _integer(value) is None:
        if isinstance(value, float) and value.is_integer():
            hint = f"a float; write it as the integer {int(value)}"
        elif isinstance(value, str):
            hint = f"a string; write it as a number without quotes{_digits(value)}"
        else:
            hint = f"a {type(value).__name__}, not an integer"
        raise ModelLoadError(f"{where}: {field.name} is {value!r}, {hint} ({fix}).")
    if not field.low <= value <= field.high:
        raise ModelLoadError(f"{where}: {field.name} is {value}; it must be an integer from "
                             f"{field.low} to {field.high}: {fix}.")


def _digits(text: str) -> str:
    return f", {text.strip()}" if text.strip().isdigit() else ""


def _check_positive(hf: dict, field: Positive, where: str) -> None:
    value = hf.get(field.name)
    if value is None:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ModelLoadError(f"{where}: {field.name} is {value!r}; it must be a finite number "
                             "above 0: fix it in config.json.")


def check_config(hf: dict, source: str = "config.json") -> None:
    """Refuse a config.json whose sizes a converter of its family cannot use (module doc).
    A ``model_type`` without a converter is left to the registry's own message."""
    family = FAMILIES.get(hf.get("model_type"))
    if family is None:
        return
    for field in family.fields:
        if isinstance(field, Size):
            _check_size(hf, field, source)
        else:
            _check_positive(hf, field, source)
    pairs = [*family.divisible, *((w, h) for w, h, head_width in family.divisible_unless
                                  if hf.get(head_width) is None)]
    for width, heads in pairs:
        if hf.get(width) is not None and hf.get(heads) is not None and hf[width] % hf[heads]:
            raise ModelLoadError(
                f"{source}: {width} {hf[width]} is not divisible by {heads} {hf[heads]}; "
                f"{width} must be a multiple of {heads}: fix one of them in config.json."
            )
