"""How a model's own eager attention rounds: read once per attention class from its source.

The eager functions of transformers' 357 modeling files agree on the order of operations but
not on precision: most take the softmax in float32 (``softmax(..., dtype=torch.float32)``),
BERT-era models in the input dtype, GPT-J and CodeGen form the scores in float32, gpt-oss
reads its sink logits from ``module.sinks``. In float32 every variant gives the same bits; in
float64, float16 and bfloat16 they differ, so ``attnlens_attention`` follows the variant of
the module's own ``eager_attention_forward``, found in the module's modeling file and read with
``ast`` (never executed). Without a readable source the common variant (float32 softmax) is used.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from dataclasses import dataclass
from functools import cache

import torch

_EAGER_NAMES = ("eager_attention_forward", "simple_eager_attention_forward")
_FLOAT32 = {"float32", "float"}


@dataclass(frozen=True)
class EagerConventions:
    """The precision choices of one eager attention function."""

    float32_softmax: bool = True  # softmax(..., dtype=torch.float32)
    float32_scores: bool = False  # q k^T formed from float32 copies (GPT-J, CodeGen)
    module_sinks: bool = False  # sink logits read from module.sinks, not a keyword
    # Sinks as a sigmoid(logsumexp(scores) - sink) factor on the output, the pattern a plain
    # softmax (Granite SWA), instead of an extra softmax column (gpt-oss); equal in exact
    # arithmetic, not in floating point.
    sink_scales_output: bool = False
    # The keywords the function names (it swallows any other into **kwargs and ignores it);
    # None when no source was found: then only attention.NO_EFFECT keywords are accepted.
    parameters: frozenset[str] | None = None
    source: str = ""  # "module.function" it was read from, "" for the default


def _is_float32(node: ast.AST) -> bool:
    """``torch.float32`` / ``torch.float`` (an attribute) or a ``.float()`` call."""
    if isinstance(node, ast.Attribute) and node.attr in _FLOAT32:
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "float")


def _read(function: ast.FunctionDef) -> tuple[bool, bool, bool, bool]:
    float32_softmax = float32_scores = module_sinks = scales_output = False
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "softmax":
                dtype = [k.value for k in node.keywords if k.arg == "dtype"]
                args = node.args[:1]
                float32_softmax |= any(_is_float32(d) for d in dtype) or any(
                    _is_float32(a) or any(_is_float32(n) for n in ast.walk(a)) for a in args
                )
            if node.func.attr == "matmul" and node.args:
                float32_scores |= _is_float32(node.args[0])
            scales_output |= node.func.attr == "logsumexp"
        if (isinstance(node, ast.Attribute) and node.attr == "sinks"
                and isinstance(node.value, ast.Name) and node.value.id == "module"):
            module_sinks = True
    return float32_softmax, float32_scores, module_sinks, module_sinks and scales_output


@cache
def _conventions_of(module_name: str) -> EagerConventions:
    modeling = sys.modules.get(module_name)
    for name in _EAGER_NAMES:
        function = getattr(modeling, name, None)
        if function is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError, SyntaxError):
            break
        definition = tree.body[0]
        if isinstance(definition, ast.FunctionDef):
            softmax32, scores32, sinks, scales = _read(definition)
            arguments = definition.args
            named = frozenset(a.arg for a in [*arguments.args, *arguments.kwonlyargs])
            return EagerConventions(softmax32, scores32, sinks, scales, named,
                                    f"{function.__module__}.{function.__name__}")
    return EagerConventions()


def eager_conventions(module: torch.nn.Module) -> EagerConventions:
    """The conventions of the eager function in ``module``'s modeling file (cached per file)."""
    return _conventions_of(type(module).__module__)
