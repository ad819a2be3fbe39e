"""Atomic writers for tables and figures: an interrupted run never leaves a half file.

The lowest layer beside ``errors``: anything may import it, it imports nothing of attnlens but
``errors``, and it needs neither pandas nor matplotlib until a table or figure is written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from attnlens.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

FIGURE_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("csv", "md")


def process_umask() -> int:
    """The process's file-mode creation mask, read when a file is made (not at import).

    Linux reports it in /proc/self/status, which leaves the mask alone; elsewhere it is read by
    setting a mask and restoring it at once (``os.umask`` has no read-only form).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", durable: bool = False) -> Iterator[IO]:
    """Write to a temporary file beside ``path``, then rename it into place.

    ``durable``: flush the file to disk before the rename (checkpoints, manifests), so even a
    power loss leaves the old file or the whole new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~process_umask())  # mkstemp makes 0600 files; give the usual permissions
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` written durably and atomically (see ``atomic_open``)."""
    with atomic_open(path, "wb", durable=True) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, value: Any) -> Path:
    """JSON with sorted keys and a final newline (the same value gives the same bytes)."""
    return atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


# Names made from data -----------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DOTS = re.compile(r"[._]{2,}")


def safe_filename(text: str, fallback: str = "item", max_length: int = 100) -> str:
    """A file name made from data (a relation, a model name) that stays in its folder.

    Anything but ASCII letters, digits, ``.``, ``_`` and ``-`` becomes ``_`` (so ``/`` and
    ``\\`` cannot make a path), runs of dots and underscores become one ``_`` (no ``..``),
    and leading or trailing ``.``/``_``/``-`` go (no hidden files): ``../../x`` -> ``x``.
    """
    name = _DOTS.sub("_", _UNSAFE.sub("_", str(text))).strip("._-")[:max_length].strip("._-")
    return name or fallback


def path_inside(folder: str | os.PathLike, name: str) -> Path:
    """``folder / name``, refused when it would leave ``folder`` (``..``, absolute paths)."""
    base = Path(folder).resolve()
    path = (base / name).resolve()
    if path == base or base not in path.parents:
        raise ConfigError(f"file name {name!r} would be written outside {folder}; "
                          "names made from data must be plain file names.")
    return path


# Spreadsheets run a cell that starts with one of these as a formula (=cmd|' /C calc'!A0).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _runs_as_formula(text: str) -> bool:
    """Starts with a formula character and is not a plain number (``-3`` stays a number)."""
    return text.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(text)


def neutralise_cell(value):
    """A text cell a spreadsheet would run as a formula, made plain text by a leading ``'``
    (what spreadsheets themselves use to mark text). A cell that already starts with ``'``
    before such text gets one more ``'``, so ``restore_cell`` undoes it exactly. Anything
    but a string is returned as it is."""
    if not isinstance(value, str):
        return value
    return "'" + value if _runs_as_formula(value.lstrip("'")) else value


def restore_cell(value):
    """The cell ``neutralise_cell`` was given (one leading ``'`` dropped before text a
    spreadsheet would run)."""
    if isinstance(value, str) and value.startswith("'") and \
            _runs_as_formula(value.lstrip("'")):
        return value[1:]
    return value


def _is_numeric(column) -> bool:
    """Whether a column (or its dtype) holds numbers or booleans."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_numeric_dtype(column) or is_bool_dtype(column)


def neutralise_formulas(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell of a non-numeric column (and every text header) through
    ``neutralise_cell``: CSV cells from data (words, relation labels, file names) never run
    as spreadsheet formulas. Numeric columns (``-0.25``) are left as they are, and so is a
    column none of whose distinct values would change (most: checked once per value)."""
    if df.columns.is_unique:
        text_columns = [c for c, dtype in zip(df.columns, df.dtypes, strict=True)
                        if not _is_numeric(dtype) and _changes(df[c], neutralise_cell)]
    else:  # a table whose column names repeat: every text column, cell by cell
        text_columns = [c for c in df.columns if not _is_numeric(df[c])]
    renamed = {c: neutralise_cell(c) for c in df.columns if neutralise_cell(c) != c}
    if not text_columns and not renamed:
        return df
    out = df.copy()
    for column in text_columns:
        out[column] = out[column].map(neutralise_cell)
    return out.rename(columns=renamed)


def _changes(column: pd.Series, cell: Callable[[Any], Any]) -> bool:
    """Whether ``cell`` (``neutralise_cell``, ``restore_cell``: each returns the very value
    it leaves alone) changes any cell of ``column``; each distinct text checked once."""
    try:
        distinct = column.unique()
    except TypeError:  # values that cannot be hashed: every cell
        distinct = column
    return any(cell(value) is not value for value in distinct)


def restore_formulas(df: pd.DataFrame) -> pd.DataFrame:
    """A table read back from CSV with ``neutralise_formulas`` undone (report pages show
    the data's own text)."""
    if df.columns.is_unique:  # each column's dtype read once, not through a Series
        text_columns = [c for c, dtype in zip(df.columns, df.dtypes, strict=True)
                        if not _is_numeric(dtype)]
    else:
        text_columns = [c for c in df.columns if not _is_numeric(df[c])]
    for column in text_columns:
        if not df.columns.is_unique or _changes(df[column], restore_cell):
            df[column] = df[column].map(restore_cell)
    renamed = {c: restore_cell(c) for c in df.columns if restore_cell(c) is not c}
    return df.rename(columns=renamed) if renamed else df  # no copy when no header changes


def markdown_cell(text: str) -> str:
    """Text safe in a Markdown table cell: ``|`` escaped, and ``&``, ``<``, ``>`` as HTML
    entities (a renderer would otherwise pass ``<script>`` or ``<img onerror=...>`` on)."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|"))


def markdown_table(df: pd.DataFrame, float_format: str = "{:.4g}", markup: bool = True) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency); text cells and headers
    through ``markdown_cell`` (``markup=False``: ``|`` escaped only, for a terminal)."""

    def text(value) -> str:
        return markdown_cell(str(value)) if markup else str(value).replace("|", "\\|")

    number = float_format.format

    def cell(value) -> str:
        if isinstance(value, float):
            return number(value)
        return text(value)

    import numpy as np
    import pandas as pd

    def column_cells(column: pd.Series) -> list[str]:
        # The values ``itertuples`` gives (each column's own iteration: Python scalars); for
        # numbers, objects and text, ``tolist()`` gives the same values at once
        kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else ""
        if kind == "f":  # Python floats only
            return by_distinct(column.to_numpy(), lambda values: list(map(number, values)))
        if kind and kind in "iub":  # Python ints and bools: no character to escape
            return list(map(str, column.tolist()))
        plain = kind == "O" or isinstance(column.dtype, pd.StringDtype)
        memo: dict[str, str] = {}  # text cells repeat (labels, tokens): each escaped once
        cells = []
        for value in column.tolist() if plain else column:
            if type(value) is str:
                done = memo.get(value)
                if done is None:
                    done = memo[value] = text(value)
                cells.append(done)
            else:
                cells.append(cell(value))
        return cells

    header = "| " + " | ".join(text(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    columns = [column_cells(df.iloc[:, k]) for k in range(df.shape[1])]
    cells = zip(*columns, strict=True) if columns else [()] * len(df)
    rows = "| " + " |\n| ".join(map(" | ".join, cells)) + " |\n" if len(df) else ""
    return header + "\n" + rule + "\n" + rows


def by_distinct(values, convert: Callable[[list[float]], list]) -> list:
    """``convert(values.tolist())`` of a 1-d float64 array, each distinct value (by its bits:
    ``-0.0`` is not ``0.0``) converted once: tables repeat values (baselines, q-values).
    ``convert`` maps a list of floats to a list as long, value by value."""
    import numpy as np

    if values.dtype != np.float64 or values.size < 2:
        return convert(values.tolist())
    # [value] -> [distinct], [value] (sorted bit patterns, and where each value's lies)
    distinct, where = np.unique(np.ascontiguousarray(values).view(np.int64), return_inverse=True)
    return np.array(convert(distinct.view(np.float64).tolist()), dtype=object)[where].tolist()


def _float_reprs(values: list[float]) -> list[str]:
    """``repr`` of each float (numpy's float64 text is the same), NaN as an empty cell."""
    return ["" if text == "nan" else text for text in repr(values)[1:-1].split(", ")] \
        if values else []


class _CsvQuoter:
    """Each text as the ``csv`` writer pandas uses (minimal quoting, ``"`` doubled, the
    system's line end) writes it in a row of several cells; each distinct text asked once."""

    def __init__(self) -> None:
        import csv
        import io

        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator=os.linesep)
        self._end = len("," + os.linesep)
        self._done: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        done = self._done.get(text)
        if done is None:
            self._buffer.seek(0)
            self._buffer.truncate()
            self._writer.writerow((text, ""))
            done = self._done[text] = self._buffer.getvalue()[:-self._end]
        return done


def _csv_cells(column: pd.Series, quote: _CsvQuoter) -> list[str] | None:
    """The cells pandas' ``to_csv`` writes for ``column`` (float64 by ``repr``, integers and
    booleans by ``str``, text quoted, missing values empty), or None for any other column."""
    import numpy as np
    import pandas as pd

    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "fiub":
        if dtype.kind != "f":
            return list(map(str, column.tolist()))
        return by_distinct(column.to_numpy(), _float_reprs) if dtype == np.float64 else None
    if not (dtype == np.dtype(object) or isinstance(dtype, pd.StringDtype)):
        return None
    values = column.tolist()
    try:
        distinct = dict.fromkeys(values)
    except TypeError:  # values that cannot be hashed: pandas writes them
        return None
    if not all(type(value) is str or _missing(value) for value in distinct):
        return None  # numbers or other objects in a text column: pandas writes them
    cells = {value: quote(value) if type(value) is str else "" for value in distinct}
    return list(map(cells.__getitem__, values))


def _missing(value) -> bool:
    """None, NaN or ``pd.NA``: an empty cell in pandas' CSV."""
    import pandas as pd

    return value is None or value is pd.NA or (type(value) is float and value != value)


def write_csv(df: pd.DataFrame, handle: IO[str]) -> None:
    """``df.to_csv(handle, index=False)``, the same text: a table of two or more uniquely
    named columns of float64, integers, booleans or text is written from each column's cells
    at once (``_csv_cells``); any other table by pandas."""
    quote = _CsvQuoter()
    names = list(df.columns)
    cells = None
    if len(names) >= 2 and df.columns.is_unique and all(type(n) is str for n in names):
        cells = [_csv_cells(df.iloc[:, k], quote) for k in range(len(names))]
    if cells is None or any(column is None for column in cells):
        df.to_csv(handle, index=False)
        return
    end = os.linesep
    handle.write(",".join(map(quote, names)) + end)
    if len(df):
        handle.write(end.join(map(",".join, zip(*cells, strict=True))) + end)


def write_table(
    df: pd.DataFrame, out_dir: str | Path, name: str, formats: Iterable[str] = ("csv", "md")
) -> list[Path]:
    """Write ``df`` as ``name.csv`` and/or ``name.md`` in ``out_dir``; return the paths."""
    paths = []
    held = _HELD_TABLES.get()
    for fmt in formats:
        path = path_inside(out_dir, f"{name}.{fmt}")  # a name from data cannot leave out_dir
        if fmt not in ("csv", "md"):
            raise DataError(f"unknown table format {fmt!r}; use csv or md.")
        if _NO_TABLE_FILES.get():
            paths.append(path)
            continue
        if held is not None:
            held.setdefault(name, {})[fmt] = (df, Path(out_dir))
            paths.append(path)
            continue
        with atomic_open(path) as handle:
            if fmt == "csv":
                write_csv(neutralise_formulas(df), handle)
            else:
                handle.write(markdown_table(df))
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


# Where ``save_figure`` sends drawing work while a figure pool is active: the innermost entry
# queues ``(figure, write, [(path, format), ...])`` (``report.figure_pool`` installs one and
# removes it when its block ends); with none, figures are drawn at once.
FIGURE_QUEUES: list[Callable[[Any, Callable[[Any, Path, str], None], list], None]] = []
# (name prefix, label) applied by ``save_figure`` while set (see ``figure_naming``).
_FIGURE_NAMING: ContextVar[tuple[str, str] | None] = ContextVar("figure_naming", default=None)


@contextmanager
def figure_naming(prefix: str = "", label: str = "") -> Iterator[None]:
    """Inside this block ``save_figure`` writes ``prefix + name`` and writes ``label`` in the
    top-left corner of every figure (encoder-decoder reports: one copy per attention type)."""
    token = _FIGURE_NAMING.set((prefix, label))
    try:
        yield
    finally:
        _FIGURE_NAMING.reset(token)


_NO_FIGURES: ContextVar[bool] = ContextVar("no_figures", default=False)


@contextmanager
def no_figures() -> Iterator[None]:
    """Inside this block ``save_figure`` draws and writes nothing and returns no paths (a
    report's null-model pass needs the tables only)."""
    token = _NO_FIGURES.set(True)
    try:
        yield
    finally:
        _NO_FIGURES.reset(token)


_NO_TABLE_FILES: ContextVar[bool] = ContextVar("no_table_files", default=False)


@contextmanager
def no_table_files() -> Iterator[None]:
    """Inside this block ``write_table`` writes no file and returns the paths it would have
    written (a report's null-model pass keeps its tables in memory)."""
    token = _NO_TABLE_FILES.set(True)
    try:
        yield
    finally:
        _NO_TABLE_FILES.reset(token)


# Tables held back by ``held_tables``: name -> {format: (table, folder)} of the last call.
_HELD_TABLES: ContextVar[dict[str, dict[str, tuple[Any, Path]]] | None] = ContextVar(
    "held_tables", default=None)


@contextmanager
def held_tables() -> Iterator[dict[str, dict[str, tuple[pd.DataFrame, Path]]]]:
    """Inside this block ``write_table`` writes no file and returns the paths it would have
    written; the dict yielded keeps, per table name and format, the table and folder of the
    last call (what those files would hold), so that the caller writes each table once, in its
    final form (``report.analyze``: a report's tables with their null columns)."""
    held: dict[str, dict[str, tuple[Any, Path]]] = {}
    token = _HELD_TABLES.set(held)
    try:
        yield held
    finally:
        _HELD_TABLES.reset(token)


def _add_label(fig, label: str):
    fig.text(0.005, 0.995, label, ha="left", va="top", fontsize=8, style="italic")
    return fig


def _labelled(recipe: Callable[[], Any], label: str):
    """A recipe's figure with ``label`` (module level, so the partial pickles)."""
    return _add_label(recipe(), label)


def _is_figure(fig) -> bool:
    """A ready matplotlib Figure (not a recipe); tells without importing matplotlib."""
    return not callable(fig) and hasattr(fig, "savefig")


def svg_twin(recipe) -> Callable[[], str] | None:
    """A zero-argument callable giving ``recipe``'s figure as SVG text without matplotlib, or
    None: a ``functools.partial`` of a figure function with an ``svg`` twin
    (``attnlens.plots.svg``), possibly labelled by ``figure_naming``."""
    if not isinstance(recipe, partial):
        return None
    if recipe.func is _labelled:
        inner, label = recipe.args
        twin = svg_twin(inner)
        return None if twin is None else partial(_svg_text, inner, label)
    draw = getattr(recipe.func, "svg", None)
    return None if draw is None else partial(_svg_text, recipe)


def _svg_text(recipe: partial, label: str = "") -> str:
    canvas = recipe.func.svg(*recipe.args, **recipe.keywords)
    if label:
        canvas.corner_label(label)
    return canvas.render()


def drawn_without_matplotlib(figure, jobs: list) -> bool:
    """Every job of ``figure`` is an SVG its twin writes (milliseconds, no matplotlib)."""
    return all(fmt == "svg" for _, fmt in jobs) and svg_twin(figure) is not None


def save_figure(
    fig, out_dir: str | Path, name: str, formats: Iterable[str] = ("svg",)
) -> list[Path]:
    """Save a figure atomically in each format; return the paths.

    ``fig`` is a matplotlib Figure (closed once written) or a recipe: a picklable
    zero-argument callable returning the Figure (``functools.partial(layer_head_heatmap,
    table, title)``). A recipe whose function has an SVG twin (``attnlens.plots.svg``) writes
    its ``.svg`` through the twin, without matplotlib; other formats and figures without a
    twin are drawn by matplotlib. Inside ``report.figure_pool.figure_pool()`` matplotlib's
    drawing happens in a worker process and the files exist once the pool block ends.
    """
    if _NO_FIGURES.get():
        if _is_figure(fig):
            _close(fig)
        return []
    naming = _FIGURE_NAMING.get()
    if naming is not None:
        prefix, label = naming
        name = prefix + name
        if label:
            fig = _add_label(fig, label) if _is_figure(fig) else partial(_labelled, fig, label)
    try:
        checked = figure_formats(formats)
    except DataError:
        if _is_figure(fig):
            _close(fig)
        raise
    jobs = [(path_inside(out_dir, f"{name}.{fmt}"), fmt) for fmt in checked]  # stays in out_dir
    if FIGURE_QUEUES and not drawn_without_matplotlib(fig, jobs):
        FIGURE_QUEUES[-1](fig, _write_figure, jobs)
        if _is_figure(fig):
            _close(fig)  # the worker draws a pickled copy
    else:
        draw_figure(fig, _write_figure, jobs)
    return [path for path, _ in jobs]


def draw_figure(figure, write: Callable[[Any, Path, str], None], jobs: list) -> None:
    """Write each ``(path, format)`` job of ``figure``: an SVG through the recipe's twin
    when it has one, anything else by ``write(fig, path, fmt)`` on the matplotlib Figure
    (built once, from the recipe, when first needed, and closed at the end)."""
    twin = svg_twin(figure)
    fig = figure if _is_figure(figure) else None
    try:
        for path, fmt in jobs:
            if fmt == "svg" and twin is not None:
                with atomic_open(path, "w") as handle:
                    handle.write(twin())
                continue
            if fig is None:
                fig = figure()
            write(fig, path, fmt)
    finally:
        if fig is not None:
            _close(fig)


def _write_figure(fig, path: Path, fmt: str) -> None:
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format=fmt, dpi=110)  # fixed layout (plots/style.py): no tight bbox


def _close(fig) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


def check_input_file(path: str | os.PathLike | None, option: str, what: str) -> Path | None:
    """``path`` when it is a readable regular file, else a one-line ``DataError`` naming the
    option that gave it and what a good file holds (``what``: "CoNLL-U treebank")."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(f"{option} {path} is a folder; pass a file ({what}).")
    if not path.exists():
        raise DataError(f"{option} file {path} does not exist; pass a file ({what}).")
    if not path.is_file():
        raise DataError(f"{option} {path} is not a regular file; pass a file ({what}).")
    if not os.access(path, os.R_OK):
        raise DataError(f"{option} {path} cannot be read (permission denied).")
    return path


NAME_MAX = 255  # bytes per file name on most file systems (ext4, xfs, btrfs, APFS)
WORK_SUFFIX_BYTES = 14  # what the work folder and lock add: ".NAME.12345678.tmp"


def check_writable_target(path: str | os.PathLike, option: str, added: int = 0) -> Path:
    """``path`` (to be created or replaced) checked before a run: not a dangling symbolic
    link, every name short enough (``added``: bytes a work file beside it adds), in an
    existing folder (not a file) that can be written, on a file system that is not mounted
    read-only. Each failure is one ``ConfigError`` naming ``option`` and what to do."""
    path = Path(path).expanduser()
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{option} {path} is a symbolic link to {os.readlink(path)}, which "
                          "does not exist; remove the link or pass another path.")
    parent = Path(os.path.abspath(path)).parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is a file, not a folder; pass a path "
                          "inside a folder.")
    limit = _name_max(parent)
    for name in Path(os.path.abspath(path)).parts[1:]:
        size = len(os.fsencode(name)) + (added if name == path.name else 0)
        if size > limit:
            raise ConfigError(f"{option} {path}: the name {name[:40]!r}... is {size} bytes "
                              f"long with what attnlens adds, over the file system's {limit}; "
                              "choose a shorter name.")
    if _read_only(parent):
        raise ConfigError(f"cannot write {option} {path}: {parent} is on a read-only file "
                          "system; choose a folder on a writable disk.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {option} {path}: {parent} is not writable; choose a "
                          "folder you can write to.")
    return path


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


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
