"""One validator for every number a user gives: options, and numbers inside option strings.

Click checks an option's type and its declared ``min``/``max``, but lets through what Python
numbers allow: ``nan`` and ``inf`` pass a range with one open end (every comparison with NaN
is false), and an integer has no upper bound, so ``--max-length 99999999999999999999`` reached
the tokenizer's Rust code and ``--budget-mb inf`` ``int()``. ``check_number`` refuses, with one
line naming the option and the range to choose from:

- floats that are not finite;
- values outside the option's range: the ``min``/``max`` declared on the option, narrowed by
  ``OPTION_LIMITS`` (bounds a value must keep so that later arithmetic does not overflow or
  divide by zero);
- integers beyond ``INT_MAX`` (2**31 - 1), whatever the option: sizes, counts and seeds
  travel through int32 or int64 code (tokenizers, numpy, torch) and a product of two of them
  must not overflow int64.

The command runner (``cli/runner.py``) passes every int and float option of every command
through ``check_number`` before anything else runs; ``parse_numbers`` reads comma-separated
lists (``--windows 1,2,4``, ``--lambda``, ``--l0-stretch``, ``view --heads``) with the same
checks. Imports nothing but ``errors``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlens.errors import ConfigError

INT_MAX = 2**31 - 1  # every integer option's ceiling (see the module docstring)
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit


@dataclass(frozen=True)
class Limit:
    """A range: ``low``/``high`` (None: unbounded on that side; ``*_open``: excluded)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""  # said after the range when a value is refused

    def narrowed(self, low: float | None, high: float | None) -> Limit:
        """This limit within the declared ``[low, high]`` (Click's min/max)."""
        new_low, low_open = self.low, self.low_open
        if low is not None and (new_low is None or low > new_low):
            new_low, low_open = low, False
        new_high, high_open = self.high, self.high_open
        if high is not None and (new_high is None or high < new_high):
            new_high, high_open = high, False
        return Limit(new_low, new_high, low_open, high_open, self.why)


# Bounds beyond the options' declared min/max, by option spelling (the same meaning in every
# command that has the option).
OPTION_LIMITS: dict[str, Limit] = {
    "--seed": Limit(0, SEED_MAX),
    "--split-seed": Limit(0, SEED_MAX),
    "--budget-mb": Limit(0.5, 1e6, why="the page's weights, in MB"),
    "--qk-gain": Limit(-1e3, 1e3, why="larger gains saturate every softmax"),
    "--l0-temperature": Limit(0, 100, low_open=True, why="the Hard Concrete temperature"),
    "--l0-lr": Limit(0, 1e3, low_open=True, why="Adam's learning rate"),
    "--l0-init": Limit(-100, 100, why="the initial log_alpha of every gate"),
    "--export-step": Limit(0, None),
}


def _fmt(value: float) -> str:
    """``1000000`` rather than ``1e+06`` for whole floats; ``nan``, ``inf``, ``0.05`` as typed."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and \
            abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def range_text(limit: Limit, integer: bool) -> str:
    """``a whole number from 2 to 2147483647``, ``a number above 0``..."""
    kind = "a whole number" if integer else "a number"
    low, high = limit.low, limit.high
    if integer and high is None:
        high = INT_MAX
    if low is not None and high is not None:
        if limit.low_open or limit.high_open:
            left, right = "(" if limit.low_open else "[", ")" if limit.high_open else "]"
            text = f"{kind} in {left}{_fmt(low)}, {_fmt(high)}{right}"
        else:
            text = f"{kind} from {_fmt(low)} to {_fmt(high)}"
    elif low is not None:
        text = f"{kind} {'above' if limit.low_open else 'of at least'} {_fmt(low)}"
    elif high is not None:
        text = f"{kind} {'below' if limit.high_open else 'of at most'} {_fmt(high)}"
    else:
        text = f"a finite {kind.removeprefix('a ')}"
    return f"{text} ({limit.why})" if limit.why else text


def _inside(value: float, limit: Limit, integer: bool) -> bool:
    high = INT_MAX if integer and limit.high is None else limit.high
    if limit.low is not None and (value <= limit.low if limit.low_open else value < limit.low):
        return False
    return high is None or (value < high if limit.high_open else value <= high)


def check_number(option: str, value, *, integer: bool | None = None,
                 low: float | None = None, high: float | None = None,
                 limit: Limit | None = None):
    """``value`` when it is finite and inside the option's range, else a ``ConfigError``.

    The range is ``limit`` (default: ``OPTION_LIMITS[option]``) within ``[low, high]``;
    ``integer`` defaults to the value's own type. None and booleans pass through.
    """
    if value is None or isinstance(value, bool):
        return value
    integer = isinstance(value, int) if integer is None else integer
    bounds = (limit or OPTION_LIMITS.get(option, Limit())).narrowed(low, high)
    shown = _fmt(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option} {shown} is not a finite number; give "
                          f"{range_text(bounds, integer)}.")
    if integer and value != int(value):
        raise ConfigError(f"{option} {shown} is not a whole number; give "
                          f"{range_text(bounds, integer)}.")
    if not _inside(value, bounds, integer):
        raise ConfigError(f"{option} {shown} is out of range; give "
                          f"{range_text(bounds, integer)}.")
    return value


def parse_numbers(option: str, text: str, *, integer: bool, example: str,
                  low: float | None = None, high: float | None = None,
                  count: int | None = None) -> tuple:
    """Comma-separated numbers (``"1,2,4"``), each through ``check_number``; ``example`` is
    shown when the text is not such a list (``count``: exactly that many numbers)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    kind = "whole numbers" if integer else "numbers"
    try:
        values = tuple(int(p) if integer else float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{option} takes {kind} like {example}, not {text!r}.") from None
    if not values or (count is not None and len(values) != count):
        wanted = f"{count} " if count is not None else ""
        raise ConfigError(f"{option} takes {wanted}{kind} like {example}, not {text!r}.")
    return tuple(check_number(option, v, integer=integer, low=low, high=high) for v in values)
