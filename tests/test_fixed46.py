"""fixed46: table files and the page's numbers, the same text as the paths they replace.

``runs.io.write_csv`` against pandas' ``to_csv`` (what every CSV was written by), Markdown and
the page payload's floats against their per-value formulas, each distinct value formatted
once (``runs.io.by_distinct``)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest

from attnlens.report.payload import encode_column
from attnlens.runs.io import (
    by_distinct,
    markdown_cell,
    markdown_table,
    neutralise_formulas,
    write_csv,
    write_table,
)

HOSTILE_TEXT = ["plain", "a,b", 'say "hi"', "line\nbreak", "carriage\rreturn", "both\r\n",
                "", " padded ", "'quoted'", "tab\there", "=1+2", "-3", "ünïcödé", '"', ","]
SPECIAL_FLOATS = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1e16,
                  9999999999999998.0, 1e-4, 9.99999e-5, 0.1 + 0.2, 1.7976931348623157e308,
                  123456789012345678.0, 1.0, 1e22, -2.5e-300]


def pandas_csv(df: pd.DataFrame) -> str:
    buffer = io.StringIO()
    df.to_csv(buffer, index=False)
    return buffer.getvalue()


def new_csv(df: pd.DataFrame) -> str:
    buffer = io.StringIO()
    write_csv(df, buffer)
    return buffer.getvalue()


def hostile_table(rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    floats = np.array(SPECIAL_FLOATS * (rows // len(SPECIAL_FLOATS) + 1))[:rows]
    texts = [HOSTILE_TEXT[i % len(HOSTILE_TEXT)] for i in range(rows)]
    with_missing = [None if i % 7 == 0 else t for i, t in enumerate(texts)]
    return pd.DataFrame({
        "float": floats,
        "repeated": np.round(rng.random(rows), 2) - 0.5,  # many repeats, some -0.0 cases
        "int": rng.integers(-10**12, 10**12, rows),
        "uint": np.arange(rows, dtype=np.uint64) + np.uint64(2**63),
        "bool": rng.random(rows) < 0.5,
        "object text": pd.Series(with_missing, dtype=object),
        "string text": pd.Series(with_missing, dtype="string"),
        "str text": pd.Series(texts, dtype=str),
        'hea"der,': np.arange(rows),
    })


def test_csv_same_text_as_pandas_on_hostile_cells():
    table = hostile_table()
    assert new_csv(table) == pandas_csv(table)
    neutralised = neutralise_formulas(table)
    assert new_csv(neutralised) == pandas_csv(neutralised)


def test_csv_floats_same_text_as_numpy_on_random_bits():
    # numpy's float64 text (pandas' to_csv) is Python's repr, for every bit pattern
    rng = np.random.default_rng(1)
    values = rng.integers(-2**63, 2**63 - 1, 40_000, dtype=np.int64).view(np.float64)
    table = pd.DataFrame({"a": values, "b": np.concatenate([values[1:], values[:1]]),
                          "c": np.round(rng.random(40_000), 3)})
    assert new_csv(table) == pandas_csv(table)


@pytest.mark.parametrize("table", [
    pd.DataFrame({"only": [1.5, math.nan, -0.0]}),  # one column: an empty row is quoted
    pd.DataFrame({"only": ["", "x"]}),
    pd.DataFrame({"a": np.array([0.1, 1 / 3], dtype=np.float32), "b": [1, 2]}),
    pd.DataFrame([[1, 2.5], [3, 4.5]], columns=["same", "same"]),
    pd.DataFrame({0: [1.5, 2.5], "b": [1, 2]}),
    pd.DataFrame({"mixed": pd.Series([1.5, "x", 3], dtype=object), "b": [1, 2, 3]}),
    pd.DataFrame({"lists": pd.Series([[1], "x"], dtype=object), "b": [1, 2]}),  # unhashable
    pd.DataFrame({"numpy text": pd.Series([np.str_("a,b"), "c"], dtype=object), "b": [1, 2]}),
    pd.DataFrame({"missing": pd.Series([None, math.nan, pd.NA, "x", float("nan")],
                                       dtype=object), "b": range(5)}),
    pd.DataFrame({"nullable": pd.array([1, None], dtype="Int64"), "b": [0.5, 1.5]}),
    pd.DataFrame({"category": pd.Categorical(["a", "b"]), "b": [0.5, 1.5]}),
    pd.DataFrame({"a": pd.Series([], dtype=float), "b": pd.Series([], dtype=str)}),
    pd.DataFrame(),
    pd.DataFrame({"a": [1.5, 2.5], "b": ["x", "y"]}, index=[10, 3]),
])
def test_csv_same_text_as_pandas_on_other_tables(table):
    assert new_csv(table) == pandas_csv(table)


def test_csv_written_without_pandas_writer(monkeypatch, tmp_path):
    """Typical tables never reach ``to_csv`` (the old code's only writer)."""
    table = hostile_table()
    expected = pandas_csv(neutralise_formulas(table))

    def refuse(*args, **kwargs):
        raise AssertionError("to_csv called")

    monkeypatch.setattr(pd.DataFrame, "to_csv", refuse)
    (path,) = write_table(table, tmp_path, "t", formats=("csv",))
    assert path.read_bytes() == expected.encode("utf-8")


def test_by_distinct_keeps_signed_zero_and_order():
    values = np.array([0.0, -0.0, 1.5, math.nan, 1.5, -0.0, math.inf, 0.0])
    calls = []

    def convert(floats):
        calls.append(len(floats))
        return [repr(v) for v in floats]

    assert by_distinct(values, convert) == [repr(v) for v in values.tolist()]
    assert calls == [5]  # 0.0, -0.0, 1.5, nan, inf: each once
    assert by_distinct(values[:1], convert) == ["0.0"]
    assert by_distinct(np.array([], dtype=np.float64), convert) == []
    single = np.array([0.25, 0.25], dtype=np.float32)  # not float64: converted as given
    assert by_distinct(single, convert) == ["0.25", "0.25"]


def reference_markdown(df: pd.DataFrame) -> str:
    """The table row by row from ``itertuples`` (what ``markdown_table`` reproduces)."""

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else markdown_cell(str(value))

    lines = ["| " + " | ".join(markdown_cell(str(c)) for c in df.columns) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("table", [
    hostile_table(45),
    pd.DataFrame({"x": [-0.0, 0.0, -0.0]}),
    pd.DataFrame({"x": np.array([0.1, 1 / 3], dtype=np.float32), "y": ["a", "b"]}),
    pd.DataFrame({"x": pd.Series([], dtype=float)}),
])
def test_markdown_as_row_by_row(table):
    assert markdown_table(table) == reference_markdown(table)


def test_payload_floats_as_before():
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.random(200), np.round(rng.random(200), 2), SPECIAL_FLOATS])
    encoded = encode_column(pd.Series(values))
    expected = [float(format(v, ".6g")) if math.isfinite(v) else None for v in values.tolist()]
    assert encoded["kind"] == "num"
    assert [repr(v) for v in encoded["values"]] == [repr(v) for v in expected]  # -0.0 kept
