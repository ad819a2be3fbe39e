"""Python's garbage collector around one command run as its own process.

Importing torch, pandas and transformers leaves ~250k long-lived objects (~390k with the
cycles the imports drop), and every full collection scans all of them again: ~0.4 s of
collections during the imports of `analyze`, ~0.5 s more during its run, and ~1 s at exit,
where the interpreter's shutdown collects again while it clears each module.
``hold()`` turns the collector off while a command imports and loads its model;
``freeze_imports()`` (when the imports are done, before the model load) freezes every object
so far (``gc.freeze``: moved to a generation that later collections skip) without collecting
them first: a full collection over them costs ~0.2 s, and the cycles the imports drop hold
~2 MB (tracemalloc, MiniLM's `analyze`), kept for the process's life; ``settle()`` (after the
model load) collects what the load left, freezes what survives and turns the collector on
again, so the load's garbage (which may hold tensors) and the run's own cycles are still
collected; ``before_exit()`` (last, when every output is closed) collects once and
freezes the rest, so the shutdown frees objects by reference count without scanning them.
Nothing is skipped that a finaliser needs: cyclic garbage is collected before each freeze
but the imports' (typing caches, the frames of caught import errors: no file or tensor of
the run), ``atexit`` handlers still run, objects still reachable at exit are freed as
before (those in reference cycles were never guaranteed a finaliser at shutdown).

Only the ``attnlens`` program itself calls these (``attnlens.cli.app.main`` reading
``sys.argv``); a caller in another process (tests calling ``main([...])``) leaves the
collector alone.
"""

from __future__ import annotations

import gc

_STATE = {"held": False}  # whether hold() turned the collector off


def hold() -> None:
    """Turn the collector off (a no-op when it is off already)."""
    if gc.isenabled():
        gc.disable()
        _STATE["held"] = True


def freeze_imports() -> None:
    """While ``hold()`` holds: freeze every object so far, without a collection first
    (module docstring; a no-op otherwise)."""
    if _STATE["held"]:
        gc.freeze()


def settle() -> None:
    """After ``hold()``: collect once, freeze the survivors, turn the collector on again
    (a no-op without ``hold()``, or when called twice)."""
    if not _STATE["held"]:
        return
    gc.collect()
    gc.freeze()
    gc.enable()
    _STATE["held"] = False


def before_exit() -> None:
    """Collect once and freeze everything left, so the interpreter's shutdown does not scan
    it again; call it when the process is about to exit, every output closed."""
    gc.collect()
    gc.freeze()
