"""Heads written one way: ``L2H8`` (layer 2, head 8, both numbered from 0).

The notation of TransformerLens and of recent papers, used in CLI output, page text, figures
and docs; tables keep their ``layer`` and ``head`` columns. Options that take heads also read
``2.8`` and ``2-8`` (older notations). Plain Python: the CLI parses heads before torch loads.
"""

from __future__ import annotations

import re

from attnlens.errors import ConfigError

_HEAD = re.compile(r"[Ll](\d+)[Hh](\d+)|(\d+)[.-](\d+)")
HEAD_FORMS = "L2H8, 2.8 or 2-8 (layer 2, head 8, from 0)"


def head_name(layer: int, head: int) -> str:
    """``L{layer}H{head}``."""
    return f"L{int(layer)}H{int(head)}"


def parse_head(text: str, option: str = "head") -> tuple[int, int]:
    """``(layer, head)`` of ``L2H8``, ``2.8`` or ``2-8`` (spaces around it ignored)."""
    match = _HEAD.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"{option} {text!r} is not a head; write heads as {HEAD_FORMS}.")
    layer, head = (int(g) for g in match.groups() if g is not None)
    return layer, head


def is_head(text: str) -> bool:
    """Whether ``text`` is a head in one of the notations ``parse_head`` reads."""
    return _HEAD.fullmatch(text.strip()) is not None


def parse_heads(text: str, option: str = "heads") -> list[tuple[int, int]]:
    """Heads separated by commas or spaces, each as ``parse_head`` reads it."""
    return [parse_head(item, option) for item in re.split(r"[,\s]+", text.strip()) if item]
