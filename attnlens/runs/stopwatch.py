"""Where a command's fixed costs go: phases timed anywhere in the process, for ``run.json``.

``phase(name)`` adds a block's wall seconds to ``PHASES`` (the command's model load, the
language-model probes inside whichever section asks first, ...); ``analyze`` takes them into
``run.json``'s ``timings`` (``fixed costs``). ``process_age()`` is the seconds since the
process started (Linux ``/proc``; None elsewhere): before ``analyze``, that is the imports,
the model and tokenizer load and the corpus.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

PHASES: dict[str, float] = {}
# The phases a command times before ``analyze`` (the rest of that time: imports and start-up)
READ_CORPUS = "corpus read"
LOAD_MODEL = "model and tokenizer load"
TOKENIZE = "corpus tokenized"
BEFORE_ANALYZE = (READ_CORPUS, LOAD_MODEL, TOKENIZE)
LM_PROBES = "language-model probes and checks (inside the first section that reads them)"
# Inside LM_PROBES, in whichever process ran them (a child's under side_work.SIDE_PREFIX)
LONG_PROBES = "language-model long probes (inside the probes)"


def add(name: str, seconds: float) -> None:
    """Add ``seconds`` to ``PHASES[name]``."""
    PHASES[name] = PHASES.get(name, 0.0) + seconds


@contextmanager
def _timed(name: str, sign: float) -> Iterator[None]:
    began = time.perf_counter()
    try:
        yield
    finally:
        add(name, sign * (time.perf_counter() - began))


def phase(name: str) -> AbstractContextManager[None]:
    """Add this block's wall seconds to ``PHASES[name]``."""
    return _timed(name, 1.0)


def outside(name: str) -> AbstractContextManager[None]:
    """This block's wall seconds taken off ``PHASES[name]`` (a wait inside that phase)."""
    return _timed(name, -1.0)


def take() -> dict[str, float]:
    """The phases timed so far (rounded to 0.01 s), forgetting them."""
    taken = {name: round(seconds, 2) for name, seconds in PHASES.items()}
    PHASES.clear()
    return taken


def process_age() -> float | None:
    """Seconds since this process started, or None where ``/proc`` does not say."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)
