"""Coverage of the hf backend, measured: ``attnlens models --verify --all``.

For every ``model_type`` of the installed transformers that has a base model class
(``AutoModel``), the sweep builds a tiny random instance (``shrink``: the config's own defaults
made small by field name, then weights drawn large enough that attention patterns are far from
uniform, as ``parity_inputs.randomise`` does), feeds it the inputs its ``main_input_name``
asks for (token ids with a padded row; images; audio features), and runs it twice on the same
batch:
with ``attn_implementation="eager"`` and through attnlens (``HFAttentionModel``, whose mapping
must succeed). It compares every attention probability the model returns and its final hidden
states. A model is *verified* when both differ by at most ``TOLERANCE``; otherwise the row says
why it was refused (no base class, attention outside the interface, a keyword attnlens does not
implement, inputs the sweep cannot make, a difference above the tolerance).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

TOLERANCE = 1e-6  # fp32 parity target of the hf backend (DESIGN.md)
MAX_PARAMETERS = 20_000_000  # a config the rules did not shrink is refused, not built
TEXT_LENGTH, DECODER_LENGTH = 9, 5
MODEL_FAILS = "the tiny model fails in its own code"  # not attnlens: eager fails as well


@dataclass
class SweepRow:
    """One model_type's result."""

    model_type: str
    architecture: str = "-"
    backend: str = "hf"
    attention: float | None = None  # max |attnlens - eager| over attention probabilities
    hidden: float | None = None  # max |attnlens - eager| over the final hidden states
    layers: int = 0  # attention layers attnlens mapped
    status: str = "refused"  # "verified", "refused", "differs"
    reason: str = ""
    fields: list[str] = field(default_factory=list)  # config fields the shrink changed


def model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def _base_class(model_type: str):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    if isinstance(name, (list, tuple)):
        name = name[0]
    if name is None:
        return None, "no base model class (AutoModel) in transformers"
    try:
        return getattr(transformers, name), ""
    except (ImportError, AttributeError) as exc:  # an optional dependency is missing
        return None, f"{name} cannot be imported here ({str(exc).strip().splitlines()[0]})"


def _first(config, *names, default=None):
    for name in names:
        for owner in (config, getattr(config, "vision_config", None),
                      getattr(config, "audio_config", None)):
            value = getattr(owner, name, None) if owner is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return default


def make_inputs(cls, config, batch: int = 2) -> dict[str, torch.Tensor]:
    """The batch the sweep feeds a model: what its ``main_input_name`` asks for."""
    main = cls.main_input_name
    gen = torch.Generator().manual_seed(1)
    if main == "input_ids":
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        vocab = int(getattr(text, "vocab_size", 0) or 0)
        if vocab < 8:
            raise ValueError("the config has no vocabulary for token ids")
        ids = torch.randint(4, vocab, (batch, TEXT_LENGTH), generator=gen)
        mask = torch.ones(batch, TEXT_LENGTH, dtype=torch.long)
        if batch > 1:
            mask[1, TEXT_LENGTH - 3:] = 0
        return _with_decoder({"input_ids": ids, "attention_mask": mask}, config, batch, gen)
    if main == "pixel_values":
        channels = _first(config, "num_channels", default=3)
        size = _first(config, "image_size", default=32)
        pixels = torch.randn(batch, channels, size, size, generator=gen)
        return _with_decoder({"pixel_values": pixels}, config, batch, gen)
    if main == "input_values":
        audio = torch.randn(batch, 1600, generator=gen)
        return _with_decoder({"input_values": audio}, config, batch, gen)
    if main == "input_features":
        bins = _first(config, "num_mel_bins", "feature_size", "input_feat_per_channel",
                      default=80)
        frames = 2 * _first(config, "max_source_positions", default=32)
        features = torch.randn(batch, bins, frames, generator=gen)
        return _with_decoder({"input_features": features}, config, batch, gen)
    raise ValueError(f"the sweep cannot make {main!r} inputs")


def _with_decoder(inputs: dict, config, batch: int, gen: torch.Generator) -> dict:
    """Encoder-decoder models also get decoder token ids (shorter than the encoder's input)."""
    if getattr(config, "is_encoder_decoder", False):
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
            else config
        vocab = int(getattr(text, "vocab_size", 0) or 0) or 8
        inputs["decoder_input_ids"] = torch.randint(4, max(5, vocab), (batch, DECODER_LENGTH),
                                                    generator=gen)
    return inputs


def _attentions(output) -> list[torch.Tensor]:
    """Every attention tensor a model output returns, in its field order."""
    found = []
    items = output.items() if hasattr(output, "items") else []
    for name, value in items:
        if "attentions" not in name or value is None:
            continue
        stack = [value]
        while stack:
            item = stack.pop(0)
            if isinstance(item, torch.Tensor):
                found.append(item)
            elif isinstance(item, (tuple, list)):
                stack = list(item) + stack
    return found


def _hidden(output) -> torch.Tensor | None:
    if hasattr(output, "last_hidden_state") and output.last_hidden_state is not None:
        return output.last_hidden_state
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b|; NaN on both sides counts as equal (fully masked rows), on one as inf."""
    if a.shape != b.shape:
        return float("inf")
    a, b = a.double(), b.double()
    diff = (a - b).abs().masked_fill(a.isnan() & b.isnan(), 0.0)
    return float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0


def _run(model, inputs: dict) -> object:
    from attnlens.backends.hf.model import call_options

    torch.manual_seed(0)  # models that draw random numbers (ViT-MAE's masking) draw the same
    with torch.no_grad():
        return model(**inputs, **call_options(model), output_attentions=True)


def verify_model_type(model_type: str) -> SweepRow:
    """Build, run and compare one model_type (module docstring)."""
    from transformers import AutoConfig

    from attnlens.backends.hf.attention import register
    from attnlens.backends.hf.model import HFAttentionModel, call_options
    from attnlens.loaders.parity_inputs import randomise
    from attnlens.loaders.shrink import shrink

    row = SweepRow(model_type)
    cls, why = _base_class(model_type)
    if cls is None:
        row.reason = why
        return row
    row.architecture = cls.__name__
    register()
    try:  # every failure of a third-party model becomes its row's reason
        config = AutoConfig.for_model(model_type)
        row.fields = shrink(config)
        with torch.device("meta"):
            size = sum(p.numel() for p in cls._from_config(config).parameters())
        if size > MAX_PARAMETERS:
            row.reason = f"the generic shrink left {size:,} parameters"
            return row
        torch.manual_seed(0)
        model = cls._from_config(config, attn_implementation="attnlens").eval()
        randomise(model)
        inputs = make_inputs(cls, config)
        probe_inputs = make_inputs(cls, config, batch=1)
    except Exception as exc:
        own = "" if _picks_by_name(exc) else f"{MODEL_FAILS}: "
        row.reason = own + _reason(exc)
        return row

    def probe(m):
        return m(**probe_inputs, **call_options(m))

    try:
        wrapped = HFAttentionModel(model, {"architecture": cls.__name__}, probe=probe)
        wrapped.set_use_sdpa(False)  # the hooked eager computation, compared bit for bit
        row.layers = wrapped.n_layers
        ours = _run(model, inputs)
    except Exception as exc:
        row.reason = _reason(exc)
        try:  # is it attnlens, or the tiny model itself?
            model.set_attn_implementation("eager")
            _run(model, inputs)
        except Exception:
            row.reason = f"{MODEL_FAILS} (eager attention too): {row.reason}"
        return row
    try:
        model.set_attn_implementation("eager")
        reference = _run(model, inputs)
    except Exception as exc:
        row.reason = f"{MODEL_FAILS} (eager attention): {_reason(exc)}"
        return row
    theirs, mine = _attentions(reference), _attentions(ours)
    if len(theirs) != len(mine):
        row.reason = f"{len(mine)} attention tensors through attnlens, {len(theirs)} eager"
        return row
    row.attention = max((max_difference(a, b) for a, b in zip(mine, theirs, strict=True)),
                        default=None)
    hidden_ours, hidden_theirs = _hidden(ours), _hidden(reference)
    if hidden_ours is not None and hidden_theirs is not None:
        row.hidden = max_difference(hidden_ours, hidden_theirs)
    if row.attention is None and row.hidden is None:
        row.reason = "the model returns neither attention probabilities nor hidden states"
        return row
    worst = max(v for v in (row.attention, row.hidden) if v is not None)
    if worst <= TOLERANCE and row.attention is not None:
        row.status, row.reason = "verified", ""
    elif row.attention is None:
        row.reason = "no attention probabilities returned (output_attentions)"
    else:
        row.status, row.reason = "differs", f"max difference {worst:.2g} > {TOLERANCE:g}"
    return row


def _picks_by_name(exc: Exception) -> bool:
    """The model looked ``attnlens`` up in its own table of attention classes (Falcon)."""
    return isinstance(exc, KeyError) and exc.args == ("attnlens",)


def _reason(exc: Exception) -> str:
    if _picks_by_name(exc):
        return ("the model picks its attention class from a fixed table by name: it does not "
                "route attention through the interface")
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def sweep(chosen: list[str] | None = None,
          progress: Callable[[int], None] | None = None) -> list[SweepRow]:
    """One row per model_type (all of the installed transformers, or ``chosen``)."""
    from transformers.utils import logging as hf_logging

    rows = []
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        for model_type in chosen or model_types():
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                logging.disable(logging.WARNING)
                try:
                    rows.append(verify_model_type(model_type))
                finally:
                    logging.disable(logging.NOTSET)
            if progress is not None:
                progress(1)
    finally:
        hf_logging.set_verbosity(verbosity)
    return rows
