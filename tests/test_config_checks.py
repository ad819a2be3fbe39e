"""config.json checked per family before a converter reads it (attnlens/loaders/config_checks.py).

Every integer size of every family is tried missing, as a string, as a float, below its range
and above it; each message names the field. Before the checks: KeyError, TypeError and
ZeroDivisionError tracebacks, and "out of memory" for 10^12 layers.
"""

from __future__ import annotations

import json
import shutil

import pytest

from attnlens.errors import ModelLoadError
from attnlens.loaders.config_checks import FAMILIES, Size, check_config


def _default_config(model_type: str) -> dict:
    """The family's config.json as transformers writes it for its default configuration."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type).to_dict()


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_transformers_own_configs_pass(model_type):
    check_config(_default_config(model_type))


def test_the_embedded_model_passes():
    from attnlens.loaders.checkpoint import default_model_path, read_config

    check_config(read_config(default_model_path()))


def _cases():
    for model_type, family in sorted(FAMILIES.items()):
        for field in family.fields:
            if isinstance(field, Size):
                yield model_type, field


@pytest.mark.parametrize(("model_type", "field"), list(_cases()),
                         ids=[f"{m}.{f.name}" for m, f in _cases()])
def test_each_size_is_checked_and_named(model_type, field):
    good = _default_config(model_type)
    value = good.get(field.name) or field.low
    bad_values = {"a string": str(value), "a float": float(value), "below": field.low - 1,
                  "above": field.high + 1, "a list": [value]}
    if field.required:
        missing = {k: v for k, v in good.items() if k != field.name}
        with pytest.raises(ModelLoadError, match=f"{field.name} is missing"):
            check_config(missing)
    for what, bad in bad_values.items():
        with pytest.raises(ModelLoadError, match=f"config.json: {field.name} is ") as error:
            check_config({**good, field.name: bad})
        assert "config.json" in str(error.value), what


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_widths_must_divide_among_heads(model_type):
    family = FAMILIES[model_type]
    pairs = [*family.divisible, *((w, h) for w, h, _ in family.divisible_unless)]
    config = _default_config(model_type)
    for width, heads in pairs:
        bad = {**config, width: config[heads] * 3 + 1, heads: config[heads]}
        for _, _, head_width in family.divisible_unless:
            bad[head_width] = None  # the divisibility matters only without an explicit head width
        if config[heads] == 1:
            bad[heads] = 2
            bad[width] = 3
        with pytest.raises(ModelLoadError, match=f"{width} {bad[width]} is not divisible by "):
            check_config(bad)


def test_an_unknown_model_type_is_left_to_the_registry():
    check_config({"model_type": "evil", "hidden_size": "x"})  # the registry names it later


def test_load_model_refuses_a_bad_config_naming_the_field(tmp_path):
    """The library path: ``load_model`` checks before its converter reads the config."""
    from transformers import BertConfig, BertModel

    from attnlens.loaders import load_model
    from tests.parity_utils import TINY, VOCAB, save_tiny

    save_tiny(BertModel, BertConfig(vocab_size=VOCAB, **TINY), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for change, message in ((("num_attention_heads", "4"), "num_attention_heads is '4'"),
                            (("num_hidden_layers", 10**12), "num_hidden_layers is 10{12}"),
                            (("num_attention_heads", 0), "num_attention_heads is 0")):
        shutil.copytree(tmp_path / "m", tmp_path / "bad", dirs_exist_ok=True)
        (tmp_path / "bad" / "config.json").write_text(json.dumps(dict([*config.items(),
                                                                       change])))
        with pytest.raises(ModelLoadError, match=message):
            load_model(tmp_path / "bad")
