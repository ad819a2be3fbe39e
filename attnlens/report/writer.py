"""Atomic writers for tables and figures: an interrupted run never leaves a half file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pandas as pd

from attnlens.errors import DataError
from attnlens.outputs import path_inside

FIGURE_FORMATS = ("png", "svg", "pdf")
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
        path = path_inside(out_dir, f"{name}.{fmt}")  # a name from data cannot leave out_dir
        with atomic_open(path) as handle:
            if fmt == "csv":
                df.to_csv(handle, index=False)
            elif fmt == "md":
                handle.write(markdown_table(df))
            else:
                raise DataError(f"unknown table format {fmt!r}; use csv or md.")
        paths.append(path)
    return paths


def save_figure(
    fig, out_dir: str | Path, name: str, formats: Iterable[str] = ("png",)
) -> list[Path]:
    """Save a matplotlib Figure atomically in each format, then close it."""
    import matplotlib.pyplot as plt

    paths = []
    try:
        for fmt in formats:
            if fmt not in FIGURE_FORMATS:
                raise DataError(f"unknown figure format {fmt!r}; use one of {FIGURE_FORMATS}.")
            path = path_inside(out_dir, f"{name}.{fmt}")
            with atomic_open(path, "wb") as handle:
                fig.savefig(handle, format=fmt, dpi=120, bbox_inches="tight")
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


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
