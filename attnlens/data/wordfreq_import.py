"""``wordfreq``'s import, done before torch loads by the commands whose reports use it.

``wordfreq`` finds its data folder through ``locate.this_dir()``, which calls
``inspect.stack()``; that scans every loaded module once (``inspect.getmodule``), so the
same import costs about twice as much after torch, pandas and the measures are loaded
(~1,800 modules) as before them (~470): docs/performance.md, demo39. This module imports
nothing else, so a command can call ``import_wordfreq`` first; the frequencies themselves
are still read at the first lookup (``attnlens.data.rarity``), as before.
"""

from __future__ import annotations


def import_wordfreq() -> None:
    """Import ``wordfreq`` now (a no-op once it is imported)."""
    import wordfreq  # noqa: F401
