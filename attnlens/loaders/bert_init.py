"""transformers' own initialisation of a ``BertModel``, without importing its modeling code.

``BertModel(config)`` under ``torch.manual_seed(seed)`` draws from the global generator twice
per weight: once as torch builds each module (``nn.Embedding``: normal(0, 1), the padding
row zeroed; ``nn.Linear``: kaiming-uniform weight, uniform bias), in construction order, then
in ``post_init``'s ``_init_weights``, module by module children first: normal(0,
``initializer_range``) for every matrix and embedding (the padding row zeroed again), zero
biases, unit LayerNorm scales. ``bert_state_dict`` makes the same draws in the same order on
tensors of the same shapes, so its weights are bitwise transformers' (tests/test_null_model.py
compares them), and skips importing ``transformers.models.bert.modeling_bert`` and the
modeling stack behind it (seconds of a report's null pass).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

ARCHITECTURES = ("BertModel",)  # the classes bert_state_dict reproduces


# The BertConfig fields bert_state_dict and covers read, with transformers 5's defaults
# (models/bert/configuration_bert.py; add_cross_attention from PretrainedConfig).
CONFIG_DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
                   "intermediate_size": 3072, "max_position_embeddings": 512,
                   "type_vocab_size": 2, "initializer_range": 0.02, "pad_token_id": 0,
                   "add_cross_attention": False}
_COUNTS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
           "max_position_embeddings", "type_vocab_size")


def config_from_json(hf: dict) -> SimpleNamespace | None:
    """The fields of ``BertConfig.from_pretrained`` that ``bert_state_dict`` reads, taken
    from config.json's dict without importing transformers (its import alone is ~1 s); None
    where a value is not of the plain type transformers keeps as it is (then AutoConfig
    reads the file)."""
    if hf.get("model_type") != "bert":
        return None
    values = {key: hf.get(key, default) for key, default in CONFIG_DEFAULTS.items()}
    if not all(type(values[key]) is int and values[key] >= 0 for key in _COUNTS):
        return None
    if type(values["add_cross_attention"]) is not bool:
        return None
    if values["pad_token_id"] is not None and type(values["pad_token_id"]) is not int:
        return None
    if type(values["initializer_range"]) is not float:  # BertConfig refuses an int
        return None
    return SimpleNamespace(model_type="bert", **values)


def covers(architecture: str, config) -> bool:
    """Whether ``bert_state_dict`` reproduces ``architecture(config)``: a plain ``BertModel``
    (pooler, no cross-attention) in float32."""
    return (architecture in ARCHITECTURES and getattr(config, "model_type", None) == "bert"
            and not getattr(config, "add_cross_attention", False)
            and torch.get_default_dtype() == torch.float32)


def _linear_shapes(config) -> list[tuple[str, int, int]]:
    """(name, in, out) of every ``nn.Linear`` of a ``BertModel``, in construction order."""
    d, inner = config.hidden_size, config.intermediate_size
    shapes = []
    for layer in range(config.num_hidden_layers):
        prefix = f"encoder.layer.{layer}."
        shapes += [(f"{prefix}attention.self.{m}", d, d) for m in ("query", "key", "value")]
        shapes += [(f"{prefix}attention.output.dense", d, d),
                   (f"{prefix}intermediate.dense", d, inner), (f"{prefix}output.dense", inner, d)]
    return [*shapes, ("pooler.dense", d, d)]


def _embedding_shapes(config) -> list[tuple[str, int, int | None]]:
    """(name, rows, padding row) of a ``BertModel``'s embeddings, in construction order."""
    return [("embeddings.word_embeddings", config.vocab_size, config.pad_token_id),
            ("embeddings.position_embeddings", config.max_position_embeddings, None),
            ("embeddings.token_type_embeddings", config.type_vocab_size, None)]


@torch.no_grad()
def bert_state_dict(config, seed: int) -> dict[str, torch.Tensor]:
    """The state dict of ``BertModel(config)`` built under ``torch.manual_seed(seed)``
    (module docstring); the global generator is left where that build leaves it."""
    d = config.hidden_size
    std = config.initializer_range or 0.02
    embeddings, linears = _embedding_shapes(config), _linear_shapes(config)
    torch.manual_seed(seed)
    # 1. torch's own reset_parameters as each module is built (values overwritten below)
    for _, rows, pad in embeddings:
        weight = torch.empty(rows, d)
        torch.nn.init.normal_(weight)
        if pad is not None:
            weight[pad] = 0
    for _, n_in, n_out in linears:
        torch.nn.init.kaiming_uniform_(torch.empty(n_out, n_in), a=math.sqrt(5))
        bound = 1 / math.sqrt(n_in) if n_in > 0 else 0
        torch.nn.init.uniform_(torch.empty(n_out), -bound, bound)
    # 2. post_init's _init_weights, children before their parents
    state: dict[str, torch.Tensor] = {}
    for name, rows, pad in embeddings:
        weight = torch.empty(rows, d).normal_(mean=0.0, std=std)
        if pad is not None:
            weight[pad] = 0
        state[f"{name}.weight"] = weight

    def layer_norm(name: str) -> None:
        state[f"{name}.weight"], state[f"{name}.bias"] = torch.ones(d), torch.zeros(d)

    def linear(name: str, n_in: int, n_out: int) -> None:
        state[f"{name}.weight"] = torch.empty(n_out, n_in).normal_(mean=0.0, std=std)
        state[f"{name}.bias"] = torch.zeros(n_out)

    layer_norm("embeddings.LayerNorm")
    for name, n_in, n_out in linears:
        linear(name, n_in, n_out)
        if name.endswith(("attention.output.dense", ".output.dense")) and "pooler" not in name:
            layer_norm(name.rsplit(".", 1)[0] + ".LayerNorm")
    return state
