"""OpenMP's idle threads sleep instead of spinning, for the ``attnlens`` program (issue 29).

GNU OpenMP (the runtime of torch's CPU wheels, which MKL uses too) keeps a thread that has
finished its share of a parallel region spinning for ~300,000 pauses (milliseconds here)
before it sleeps, so that the next region starts at once. Between torch's operations
`analyze` runs Python (the analyzers, the tables), so at two threads the second thread spins
through most of that time and holds the second core: the language-model probes' side worker
(``attnlens.report.side_work``), the figure workers, or any other process then get half a
core, and a region whose partner was descheduled waits for it (demo34 measured the demo's
probes at 4.9 s beside a passive parent against 6.3 s beside a spinning one, idle; 2.4-3x the
whole demo's wall on a machine with one core busy elsewhere). ``OMP_WAIT_POLICY=PASSIVE``
makes idle threads sleep at once. It changes no number: the same threads split the same
work, only how they wait differs.

The runtime reads the variable once, when torch loads it, so ``passive_waits`` must run
before ``import torch``; ``attnlens.cli.app.main`` calls it for the program itself (not for
a caller's process, e.g. tests calling ``main([...])``). A user's own ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

WAIT_POLICY = "OMP_WAIT_POLICY"
SPIN_COUNT = "GOMP_SPINCOUNT"


def passive_waits(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless torch is loaded already or the user chose a
    wait policy or spin count; whether it was set."""
    environ = os.environ if environ is None else environ
    if "torch" in sys.modules or WAIT_POLICY in environ or SPIN_COUNT in environ:
        return False
    environ[WAIT_POLICY] = "PASSIVE"
    return True
