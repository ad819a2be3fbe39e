"""Ctrl-C and SIGTERM held back over a step that must not be cut, then raised as they came.

Two kinds of step need it: making or publishing an output folder (``runs.outputs``: an
interruption must find it registered for clean-up or renamed into place), and forking a
worker process (``report.side_work``, ``report.figure_pool``). A signal that arrives during
``os.fork`` is handled by the Python code that runs next, which can be an ``os.register_at_fork``
callback (``logging`` registers one); an exception raised there is printed and dropped, so the
interruption would be lost and the run would go on to the end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM)


class HeldSignals:
    """Ctrl-C and SIGTERM deferred until ``release()``, then raised as they came.

    The Python-level handlers are swapped for one that records the signal: Python runs
    signal handlers in the main thread whichever thread the OS delivered the signal to, so
    this holds with worker threads running (a per-thread signal mask would not: the signal
    would go to a worker and be handled at once). Off the main thread it holds nothing.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in HELD:
                self.previous[sig] = signal.signal(sig, self._defer)

    def _defer(self, signum: int, frame: Any) -> None:
        self.pending.append(signum)

    def release(self) -> None:
        """Restore the handlers; a deferred signal is handled now (by the restored one)."""
        previous, self.previous = self.previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        pending, self.pending = self.pending, []
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM over the block; raise a held one when it ends."""
    held = HeldSignals()
    try:
        yield
    finally:
        held.release()
