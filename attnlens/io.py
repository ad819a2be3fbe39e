"""Atomic writers for tables and figures: an interrupted run never leaves a half file.

The lowest layer beside ``errors``: anything may import it, it imports nothing of attnlens but
``errors``, and it needs neither pandas nor matplotlib until a table or figure is written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import IO, TYPE_CHECKING

from attnlens.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

FIGURE_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("csv", "md")
# A line written in the corner of every figure saved while set (see ``figure_label``).
_FIGURE_LABEL: ContextVar[str | None] = ContextVar("figure_label", default=None)
_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write to a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual permissions
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def markdown_table(df: pd.DataFrame, float_format: str = "{:.4g}") -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""

    def cell(value) -> str:
        if isinstance(value, float):
            return float_format.format(value)
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def write_table(
    df: pd.DataFrame, out_dir: str | Path, name: str, formats: Iterable[str] = ("csv", "md")
) -> list[Path]:
    """Write ``df`` as ``name.csv`` and/or ``name.md`` in ``out_dir``; return the paths."""
    paths = []
    for fmt in formats:
        path = Path(out_dir) / f"{name}.{fmt}"
        with atomic_open(path) as handle:
            if fmt == "csv":
                df.to_csv(handle, index=False)
            elif fmt == "md":
                handle.write(markdown_table(df))
            else:
                raise DataError(f"unknown table format {fmt!r}; use csv or md.")
        paths.append(path)
    return paths


def figure_formats(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"png,svg"`` (or a list) -> validated, lower-case figure formats, in the given order."""
    items = text.split(",") if isinstance(text, str) else list(text)
    formats = tuple(dict.fromkeys(f.strip().lower() for f in items if f.strip()))
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown or not formats:
        raise DataError(
            f"unknown figure format {', '.join(unknown) or '(none given)'}; "
            f"use {', '.join(FIGURE_FORMATS)} (comma-separated)."
        )
    return formats


@contextmanager
def figure_label(text: str) -> Iterator[None]:
    """Write ``text`` in the top-left corner of every figure saved in this block.

    Used to say which attention type (encoder-decoder models) a section's figures show.
    """
    token = _FIGURE_LABEL.set(text)
    try:
        yield
    finally:
        _FIGURE_LABEL.reset(token)


def save_figure(
    fig, out_dir: str | Path, name: str, formats: Iterable[str] = ("png",)
) -> list[Path]:
    """Save a matplotlib Figure atomically in each format, then close it."""
    import matplotlib.pyplot as plt

    paths = []
    label = _FIGURE_LABEL.get()
    if label:
        fig.text(0.0, 1.0, label, ha="left", va="bottom", fontsize=9, style="italic")
    try:
        for fmt in figure_formats(formats):
            path = Path(out_dir) / f"{name}.{fmt}"
            with atomic_open(path, "wb") as handle:
                fig.savefig(handle, format=fmt, dpi=120, bbox_inches="tight")
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def check_input_file(path: str | Path | None, option: str, what: str) -> None:
    """Refuse an input path (given with ``option``) that is missing or a folder."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{option} {path} is a folder; pass a {what} file.")
    if not path.is_file():
        raise DataError(f"{option} file {path} does not exist; pass a {what} file.")


def check_output_path(out_dir: str | Path) -> Path:
    """Refuse an output folder that cannot be created or written, without creating it."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise DataError(f"output path {path} is a file; pass a folder with --out.")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise DataError(f"cannot create output folder {path}: {existing} is a file.")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "is" if existing == path else f"cannot be created: {existing} is"
        raise DataError(f"output folder {path} {where} not writable.")
    return path


def check_output_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` (and parents) or fail with a one-line reason."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise DataError(f"output path {path} is a file; pass a folder with --out.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create output folder {path}: {exc.strerror}.") from exc
    if not os.access(path, os.W_OK):
        raise DataError(f"output folder {path} is not writable.")
    return path
