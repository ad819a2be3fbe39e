"""An exclusive lock on an output folder: two runs never write the same ``--out`` at once.

A run takes the lock when its output folder is checked, before the model loads, by creating
``.NAME.lock`` beside the folder with ``O_CREAT | O_EXCL`` (atomic on local file systems: of
two runs, exactly one creates it). The file holds who holds it: process id, host, start time,
the command line, and on Linux the process's start tick (so a recycled process id is not
taken for the run). The lock is released when the run ends (published, failed or
interrupted: ``OutputFolder.writing``, the CLI's ``main`` and, last, ``atexit``).

A second run into the same folder is refused at once, naming the running one. A lock whose
process is gone (``kill -9``, a crash, a power loss) is stale: a run refuses it too, saying
so, and ``--resume`` or ``--force`` clear it (the user then chose what happens to the kept
work). Imports nothing heavy.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shlex
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from attnlens.errors import ConfigError

_HELD: dict[Path, int] = {}  # lock files this process holds -> how many OutputFolders use it


@dataclass(frozen=True)
class Holder:
    """Who holds a lock (the lock file's JSON)."""

    pid: int
    host: str
    started: str
    command: str
    process_start: str | None = None  # Linux: /proc/PID/stat start tick

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started}: {self.command}"


def lock_path(target: Path) -> Path:
    """The lock of ``target``: ``.NAME.lock`` beside it."""
    return target.parent / f".{target.name}.lock"


def _process_start(pid: int) -> str | None:
    """The start tick of process ``pid`` (field 22 of /proc/PID/stat), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def this_process() -> Holder:
    return Holder(
        pid=os.getpid(), host=socket.gethostname(),
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(["attnlens", *sys.argv[1:]]) if sys.argv else "python",
        process_start=_process_start(os.getpid()),
    )


def is_running(holder: Holder) -> bool | None:
    """True/False for a process on this host; None for another host (cannot tell)."""
    if holder.host != socket.gethostname():
        return None
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    now = _process_start(holder.pid)
    return not (holder.process_start and now and now != holder.process_start)


def _read(path: Path) -> Holder | None:
    """The lock file's holder; None when it vanished or is not (yet) complete JSON."""
    for _ in range(5):  # a lock being written right now: its JSON arrives within moments
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Holder(**{k: data.get(k) for k in Holder.__dataclass_fields__})
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            time.sleep(0.05)
    return Holder(pid=-1, host="?", started="?", command="(unreadable lock file)")


def _create(path: Path, holder: Holder) -> bool:
    """Create the lock file with O_EXCL; False when it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(holder), handle)
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _remove_stale(path: Path, stale: Holder) -> None:
    """Move the stale lock aside and delete it, unless another run replaced it meanwhile
    (then its lock is put back and this run is refused by the next attempt)."""
    aside = path.with_name(f"{path.name}.{secrets.token_hex(4)}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _read(aside) != stale:
        with contextlib.suppress(FileExistsError):  # put the other run's lock back, unless
            os.link(aside, path)  # one exists again
    aside.unlink(missing_ok=True)


def _secondary_rank() -> bool:
    """A torchrun rank other than 0: rank 0 holds the lock for the whole job."""
    return os.environ.get("RANK", "0") != "0" and os.environ.get("WORLD_SIZE", "1") != "1"


def acquire(target: Path, option: str, given: Path, *, clear_stale: bool,
            resumable: bool) -> Path | None:
    """Take the lock of ``target`` (module docstring); the lock file, or None where none is
    needed (another torchrun rank) or possible yet (the parent folder does not exist).
    ``clear_stale``: --resume or --force was given, so a stale lock is cleared."""
    path = lock_path(target)
    if _secondary_rank() or not path.parent.is_dir():
        return None
    if path in _HELD:  # this process checks the same folder again
        _HELD[path] += 1
        return path
    me = this_process()
    for _ in range(3):
        if _create(path, me):
            _HELD[path] = 1
            return path
        holder = _read(path)
        if holder is None:
            continue  # released meanwhile: try again
        running = is_running(holder)
        if running is False and clear_stale:
            _remove_stale(path, holder)
            continue
        if running is False:
            again = ("add --resume to continue what it kept, or --force to start over "
                     "(either clears the lock)" if resumable else
                     "add --force to start over (it clears the lock)")
            raise ConfigError(
                f"{option} {given} is locked by an attnlens run that is no longer running "
                f"({holder.describe()}; killed?); {again}, or delete {path}."
            )
        where = "" if running else (f"; if no such run is going on on {holder.host}, delete "
                                    f"{path}")
        raise ConfigError(
            f"{option} {given} is being written by another attnlens run ({holder.describe()})"
            f"; wait for it to end, or choose another {option}{where}."
        )
    raise ConfigError(f"{option} {given}: could not take its lock {path}; rerun.")


def release(path: Path | None) -> None:
    """Give back one use of the lock; the file goes when the last use does."""
    if path is None or path not in _HELD:
        return
    _HELD[path] -= 1
    if _HELD[path] > 0:
        return
    del _HELD[path]
    holder = _read(path)
    if holder is not None and holder.pid == os.getpid():
        path.unlink(missing_ok=True)


def release_all() -> None:
    """Every lock this process holds (the CLI calls it when a command ends; atexit too)."""
    for path in list(_HELD):
        _HELD[path] = 1
        release(path)


atexit.register(release_all)
