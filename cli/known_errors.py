"""Failures that are the environment's, not a bug, as one line with a next step.

``known_error(exc, args)`` is what ``main()`` prints after ``Error:`` for an exception that
is not an ``AttnlensError``: running out of memory in any wording (Python's ``MemoryError``,
torch's "can't allocate memory" and CUDA's "out of memory", numpy's "Unable to allocate"),
and the operating system's refusals (``OSError`` by errno: read-only file system, name too
long, not a directory, permission, disk full or over quota, too many open files). Anything
else returns None and keeps its traceback: it is a bug to report. Imports nothing heavy.
"""

from __future__ import annotations

import errno
import re

from attnlens.errors import AttnlensError

MEMORY_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory",
                "not enough memory", "unable to allocate", "failed to allocate", "bad_alloc",
                "std::bad_alloc")
_ASKED = re.compile(r"allocate (\d+) bytes|allocate ([\d.]+) ([KMGT]i?B)", re.IGNORECASE)


def is_memory_error(exc: BaseException) -> bool:
    """Out of memory, whatever the library's wording."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return any(word in text for word in MEMORY_WORDS)


def _asked(exc: BaseException) -> str:
    """``" (it asked for 172 GB at once)"`` when the message says how much was asked."""
    match = _ASKED.search(str(exc))
    if match is None:
        return ""
    if match.group(1):
        gb = int(match.group(1)) / 1e9
        return f" (it asked for {gb:,.0f} GB at once)" if gb >= 100 else \
            f" (it asked for {gb:.3g} GB at once)"
    return f" (it asked for {match.group(2)} {match.group(3)} at once)"


def memory_message(exc: BaseException, sizes: list[str], has_batching: bool) -> str:
    """Out of memory, and which of the sizes this command was given to lower."""
    if sizes:
        advice = "lower " + ", ".join(sizes)
        if has_batching:
            advice += ", or --batch-size / --max-length"
    elif has_batching:
        advice = "lower --batch-size or --max-length"
    else:
        advice = "use a smaller model or input, or a machine with more memory"
    return f"out of memory{_asked(exc)}; {advice}."


def os_message(exc: OSError) -> str | None:
    """The operating system's refusal, by errno, with what to do."""
    name = exc.filename if exc.filename is not None else "a file"
    code = exc.errno
    if code == errno.EROFS:
        return f"{name} is on a read-only file system; write to a folder on a writable disk."
    if code == errno.ENAMETOOLONG:
        return (f"a file name is too long for the file system ({str(name)[:80]}...); choose a "
                "shorter name (at most 255 bytes per name on most file systems).")
    if code == errno.ENOTDIR:
        return f"{name}: a part of this path is a file, not a folder; check the path."
    if isinstance(exc, PermissionError):
        return (f"permission denied: {name}; choose a place you can write to (or read), or "
                "change its permissions.")
    if code == errno.ENOSPC:
        return "no space left on the device; free space or choose another --out folder."
    if code == errno.EDQUOT:
        return "disk quota exceeded; free space or choose another --out folder."
    if code in (errno.EMFILE, errno.ENFILE):
        return "too many open files; raise the limit (ulimit -n 4096) and rerun."
    if exc.filename is not None and exc.strerror:
        return (f"cannot use {name}: {exc.strerror}; check the path (was it changed by another "
                "program while the command ran?) and rerun.")
    return None


def known_error(exc: BaseException, sizes: list[str] | None = None,
                has_batching: bool = True) -> str | None:
    """One line for a failure a user can act on, or None for a bug (keeps its traceback).
    ``sizes``: the size options the command was given (``--bootstrap 1000000000 (default
    1000)``), named when memory ran out."""
    if isinstance(exc, AttnlensError):
        return str(exc)
    if is_memory_error(exc):
        return memory_message(exc, sizes or [], has_batching)
    if isinstance(exc, OSError):
        return os_message(exc)
    return None
