"""The shape of a metric's data file, checked before the model loads (``prune --data``).

Each metric reads its own kind of file: sentence pairs (``sentence1,sentence2,score`` CSV),
labelled rows (``text,label`` CSV), plain text (one example per line) or source/target lines
(``source<TAB>target``). A file of another kind would otherwise be read as examples of this
one (a CoNLL-U treebank as one example per word line) or fail after the model has loaded and
the metric has started. ``check_metric_data`` reads the file the way its metric will and
refuses another shape with the line that shows it. Imports nothing heavy.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from attnlens.data.files import read_utf8, refuse_conllu
from attnlens.data.pairs import read_pairs
from attnlens.data.text import read_text_file
from attnlens.errors import DataError
from attnlens.runs.io import check_input_file

CSV_SHAPES = {2: "text,label rows (--metric accuracy)",
              3: "sentence1,sentence2,score rows (--metric sts)"}


def _csv_widths(text: str, source: str) -> list[tuple[int, int]]:
    """(line number, column count) of every non-empty CSV row."""
    try:
        rows = list(enumerate(csv.reader(io.StringIO(text, newline="")), start=1))
    except csv.Error as exc:
        raise DataError(f"{source} is not a valid CSV ({exc}).") from None
    return [(n, len(row)) for n, row in rows if row]


def check_csv_shape(path: Path, option: str, widths: tuple[int, ...]) -> int:
    """The column count shared by every row of the CSV at ``path`` (one of ``widths``)."""
    text = read_utf8(path)
    expected = " or ".join(CSV_SHAPES[w] for w in widths)
    refuse_conllu(text, str(path), option, f"a CSV of {expected}")
    rows = _csv_widths(text, str(path))
    if not rows:
        raise DataError(f"{option} {path} holds no rows; give a CSV of {expected}.")
    width = rows[0][1]
    for line, n in rows:
        if n not in widths or n != width:
            raise DataError(f"{path}:{line}: {n} column(s), but {option} takes a CSV of "
                            f"{expected}, every row alike; fix the file or choose --metric.")
    return width


def check_seq2seq_lines(path: Path, option: str) -> None:
    """Every non-blank line is ``source<TAB>target`` with both sides non-empty."""
    text = read_utf8(path)
    refuse_conllu(text, str(path), option, "source<TAB>target lines")
    good = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise DataError(f"{path}:{number}: expected source<TAB>target, got {len(parts)} "
                            "tab-separated field(s); --metric seq2seq reads one pair per line.")
        good += 1
    if good < 2:
        raise DataError(f"{option} {path} holds {good} source/target pair(s); write at least 2.")


def check_metric_data(metric: str, path: Path | None, option: str,
                      score_range: tuple[float, float]) -> None:
    """Read ``path`` the way ``metric`` will (``auto``: by its extension), refusing another
    kind of file before the model loads."""
    if path is None:
        return
    path = check_input_file(path, option, "data")
    is_csv = str(path).lower().endswith(".csv")
    if metric == "sts":
        read_pairs(path, score_range, option=option)
    elif metric == "seq2seq":
        check_seq2seq_lines(path, option)
    elif metric == "accuracy":
        check_csv_shape(path, option, (2,))
    elif metric in ("mlm", "lm", "fidelity") or not is_csv:
        read_text_file(path, option=option)
    elif check_csv_shape(path, option, (2, 3)) == 3:  # auto on a CSV: pairs, or labelled rows
        read_pairs(path, score_range, option=option)
