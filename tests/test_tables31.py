"""Issue 29 (tables31): the report's faster table, null and page paths give what the paths
they replaced gave, byte for byte. The old implementations are kept here as they were and
run beside the new ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.runs import io

FORMULA_TEXT = ["=1+1", "'=x", "-2", "+a", "@c", "\tz", "plain", "''@c", None, "x", "plain"]


def _old_markdown_table(df: pd.DataFrame, float_format: str = "{:.4g}",
                        markup: bool = True) -> str:
    def text(value) -> str:
        return io.markdown_cell(str(value)) if markup else str(value).replace("|", "\\|")

    def cell(value) -> str:
        if isinstance(value, float):
            return float_format.format(value)
        return text(value)

    header = "| " + " | ".join(text(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def _old_neutralise_formulas(df: pd.DataFrame) -> pd.DataFrame:
    text_columns = [c for c in df.columns if not io._is_numeric(df[c])]
    renamed = {c: io.neutralise_cell(c) for c in df.columns if io.neutralise_cell(c) != c}
    if not text_columns and not renamed:
        return df
    out = df.copy()
    for column in text_columns:
        out[column] = out[column].map(io.neutralise_cell)
    return out.rename(columns=renamed)


def _mixed_table() -> pd.DataFrame:
    n = len(FORMULA_TEXT)
    return pd.DataFrame({
        "int": np.arange(-3, n - 3),
        "uint8": np.arange(n, dtype=np.uint8),
        "bool": np.arange(n) % 2 == 0,
        "float32": np.linspace(-1, 1, n, dtype=np.float32),
        "float": np.r_[np.linspace(-1e-9, 1e9, n - 2), np.nan, np.inf],
        "text": pd.array(FORMULA_TEXT, dtype="str"),
        "object": pd.Series(["a|b", 1, 2.5, None, "<x>", "a|b", True, "=f", 3, "y", "y"],
                            dtype=object),
        "repeated": pd.array(["L0 <b>"] * (n - 1) + ["|"], dtype="str"),
        "Int64": pd.array([1, None] * 5 + [7], dtype="Int64"),
        "category": pd.Categorical(["p", "=q"] * 5 + ["p"]),
        "=header": ["fine"] * n,
    })


def test_markdown_table_equals_the_cell_by_cell_path() -> None:
    table = _mixed_table()
    for frame in (table, table.iloc[:0], table[[]], table.iloc[::-1]):
        for markup in (True, False):
            assert io.markdown_table(frame, markup=markup) == _old_markdown_table(
                frame, markup=markup)


def test_neutralise_formulas_writes_the_same_csv_as_the_cell_by_cell_path() -> None:
    table = _mixed_table()
    plain = table.drop(columns=["=header"]).assign(
        text=pd.array(["a", None] * 5 + ["b"], dtype="str"),
        object=pd.Series(["a", 1, None] * 3 + ["b", "c"], dtype=object),
        category=pd.Categorical(["p", "q"] * 5 + ["p"]))
    duplicated = table.rename(columns={"object": "text"})
    for frame in (table, plain, table[["int", "float"]], duplicated, table.iloc[:0]):
        new, old = io.neutralise_formulas(frame), _old_neutralise_formulas(frame)
        assert new.to_csv(index=False) == old.to_csv(index=False)
    # nothing to change: the table itself comes back (no copy)
    assert io.neutralise_formulas(plain) is plain


def _old_restore_formulas(df: pd.DataFrame) -> pd.DataFrame:
    """``io.restore_formulas`` before fixed43 (every column as a Series, always renamed)."""
    text_columns = [c for c in df.columns if not io._is_numeric(df[c])]
    for column in text_columns:
        if not df.columns.is_unique or io._changes(df[column], io.restore_cell):
            df[column] = df[column].map(io.restore_cell)
    return df.rename(columns={c: io.restore_cell(c) for c in df.columns})


def test_restore_formulas_reads_back_what_the_csv_held() -> None:
    """fixed43: the tables read back (dtypes read once, no copy without a renamed header)
    are those the old path gave, written tables with formulas, headers and repeats."""
    from io import StringIO

    table = _mixed_table()
    plain = table.drop(columns=["=header"]).assign(
        text=pd.array(["a", None] * 5 + ["b"], dtype="str"),
        object=pd.Series(["a", 1, None] * 3 + ["b", "c"], dtype=object),
        category=pd.Categorical(["p", "q"] * 5 + ["p"]))
    duplicated = table.rename(columns={"object": "text"})
    for frame in (table, plain, table[["int", "float"]], duplicated, table.iloc[:0]):
        text = io.neutralise_formulas(frame).to_csv(index=False)
        new = io.restore_formulas(pd.read_csv(StringIO(text)))
        old = _old_restore_formulas(pd.read_csv(StringIO(text)))
        pd.testing.assert_frame_equal(new, old, check_exact=True)
        assert new.to_csv(index=False) == old.to_csv(index=False)
    read = pd.read_csv(StringIO(plain.to_csv(index=False)))
    assert io.restore_formulas(read) is read  # nothing to rename: no copy


def _old_add_null_columns(table, null, value="value", declared_keys=()):
    from attnlens.stats.null import NULL_COLUMNS, QUANTILES, null_keys, per_layer

    if value not in table.columns or value not in null.columns:
        return table
    keys = [k for k in null_keys(table, declared_keys) if k in null.columns and k != value]
    by = [*keys, "layer"] if per_layer(table, keys) else keys
    values = pd.to_numeric(null[value], errors="coerce")
    frame = null[by].assign(_v=values) if by else pd.DataFrame({"_v": values})
    frame = frame[np.isfinite(frame["_v"])]
    if by:
        grouped = frame.groupby(by, dropna=False)["_v"]
        stats = grouped.agg(null_mean="mean",
                            null_low=lambda s: float(np.quantile(s, QUANTILES[0])),
                            null_high=lambda s: float(np.quantile(s, QUANTILES[1])))
        stats = stats.reset_index()
        out = table.drop(columns=[c for c in NULL_COLUMNS if c in table.columns])
        merged = out.merge(stats, on=by, how="left", sort=False)
        merged.index = table.index
        return merged
    raise AssertionError("not a grouped table")


def _null_cases():
    rng = np.random.default_rng(0)
    n = 600
    table = pd.DataFrame({
        "layer": np.repeat(np.arange(6), n // 6), "head": np.tile(np.arange(100), 6),
        "measure": pd.array(rng.choice(["a", "b", "c", None], n), dtype="str"),
        "relation": pd.array(rng.choice(["nsubj", "obj"], n), dtype="str"),
        "fraction": rng.choice([0.25, 0.5], n),
        "value": rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, n)})
    null = table.assign(value=table["value"].to_numpy() * rng.uniform(0.5, 2, n))
    null.loc[rng.choice(n, 40, replace=False), "value"] = np.nan
    null.loc[rng.choice(n, 5, replace=False), "value"] = np.inf
    yield table, null, ()
    yield table, null, ("fraction",)
    yield table[table["layer"] == 0].drop_duplicates(["measure", "relation"]), null, ()
    yield table, null[null["measure"] != "a"], ()  # groups the null lacks
    single = null.groupby(["measure", "layer"], dropna=False).head(1)  # one value per group
    yield table, single, ()
    yield table, null.assign(value=np.nan), ()  # no finite null value at all


def test_null_columns_equal_the_group_by_quantiles() -> None:
    from attnlens.stats.null import add_null_columns

    for table, null, declared in _null_cases():
        new = add_null_columns(table, null, "value", declared)
        old = _old_add_null_columns(table, null, "value", declared)
        assert new.to_csv(index=False) == old.to_csv(index=False)
        assert new.dtypes.to_dict() == old.dtypes.to_dict()
        assert (new.index == old.index).all()
        assert io.markdown_table(new) == io.markdown_table(old)


def _old_examples(self, decode, text_of=None) -> pd.DataFrame:
    """``HeadExamples.examples`` before tables31 (scalars read from tensors, each record
    decoding its sentence)."""
    import json

    from attnlens.measures.heads.examples import EXAMPLE_COLUMNS, window_text

    def record(mi, measure, layer, head, rank, value, index):
        ids = self.sentence_ids.get(str(index), [])
        tokens = decode(ids) if ids else []
        words = self.sentence_words.get(str(index))
        sentence = " ".join(words) if words else (text_of(ids) if text_of else " ".join(tokens))
        at = (mi, layer, head, rank)
        query, key, start = (int(t[at]) for t in (self.top_query, self.top_key, self.top_start))
        width = max(0, min(self.window, len(tokens) - start))
        window = window_text(self.top_window[at][:width, :width].float())

        def token(i: int) -> str:
            return tokens[i] if 0 <= i < len(tokens) else ""

        return {"layer": layer, "head": head, "measure": measure, "rank": rank + 1,
                "sentence": sentence, "query_token": token(query), "key_token": token(key),
                "value": value, "sentence_index": index, "query": query, "key": key,
                "window_start": start,
                "window_tokens": json.dumps(tokens[start:start + width], ensure_ascii=False),
                "window": window}

    records = []
    for mi, measure in enumerate(self.measures):
        for layer in range(self.n_layers):
            for head in range(self.heads_per_layer[layer]):
                for rank in range(self.k):
                    value = float(self.top_value[mi, layer, head, rank])
                    index = int(self.top_sentence[mi, layer, head, rank])
                    if index < 0 or not value > -float("inf"):
                        continue
                    records.append(record(mi, measure, layer, head, rank, value, index))
    return pd.DataFrame.from_records(records, columns=list(EXAMPLE_COLUMNS))


def test_head_examples_table_equals_the_per_record_path() -> None:
    from attnlens.measures.heads.examples import HeadExamples
    from attnlens.measures.heads.head_stats import MEASURES
    from tests.test_head_examples import CLS, SEP, previous_token_batch

    examples = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=3, window=4)
    examples.update(*previous_token_batch([0.5, 0.9, 0.7], [10, 11, 12]))
    examples.update(*previous_token_batch([0.6, 0.2], [13, 14]))
    examples.sentence_words["12"] = ["a", "b|c", "<d>"]  # a sentence with its words
    calls = []

    def decode(ids):
        calls.append(ids)
        return [f"t{i}" for i in ids]

    for text_of in (None, lambda ids: "text " + "-".join(map(str, ids))):
        new = examples.examples(decode, text_of)
        assert len(new) > 10
        assert new.to_csv(index=False) == _old_examples(examples, decode, text_of).to_csv(
            index=False)
        assert new.dtypes.to_dict() == _old_examples(examples, decode, text_of).dtypes.to_dict()
    calls.clear()
    table = examples.examples(decode)
    assert len(calls) == table["sentence_index"].nunique() < len(table)  # once per sentence
    # ties (12.5 -> 12, 37.5 -> 38, half to even) from one conversion of every window
    examples.top_window[..., 0, :2] = torch.tensor([0.125, 0.375], dtype=torch.float16)
    new = examples.examples(decode)
    assert new.to_csv(index=False) == _old_examples(examples, decode).to_csv(index=False)
    assert new["window"].str.startswith("12 38").any()


def test_head_examples_window_not_finite_keeps_the_error() -> None:
    """A NaN in an example's window raises as each window's own text did (fixed43: every
    window converted at once, each on its own when one is not finite)."""
    from attnlens.measures.heads.examples import HeadExamples, window_percents
    from attnlens.measures.heads.head_stats import MEASURES
    from tests.test_head_examples import CLS, SEP, previous_token_batch

    examples = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=3, window=4)
    examples.update(*previous_token_batch([0.5, 0.9, 0.7], [10, 11, 12]))
    decode = lambda ids: [f"t{i}" for i in ids]  # noqa: E731
    assert window_percents(examples.top_window) is not None
    examples.top_window[0, 0, 0, 0, 0, 0] = float("nan")
    assert window_percents(examples.top_window) is None
    with pytest.raises(ValueError):
        examples.examples(decode)
    examples.top_window[0, 0, 0, 0, 0, 0] = 0
    examples.top_sentence[0, 0, 0, 2] = -1  # no example there: its window is not read
    examples.top_window[0, 0, 0, 2] = float("inf")
    assert window_percents(examples.top_window) is None
    assert examples.examples(decode).to_csv(index=False) == _old_examples(
        examples, decode).to_csv(index=False)


def _old_head_rows(heads_per_layer, values, extra) -> pd.DataFrame:
    frames = []
    for layer, h in enumerate(heads_per_layer):
        for head in range(h):
            frame = pd.DataFrame(dict(extra))
            frame.insert(0, "head", head)
            frame.insert(0, "layer", layer)
            frame["value"] = values[layer, head].reshape(-1)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def test_spectrum_rows_equal_one_frame_per_head() -> None:
    from attnlens.measures.spectrum.spectrum import head_rows

    rng = np.random.default_rng(1)
    for heads, dtype in (([3, 3], np.float64), ([2, 0, 3], np.float32)):  # pruned heads too
        values = rng.normal(size=(len(heads), max(heads), 4, 2)).astype(dtype)
        for extra in ({"k_fraction": np.repeat([0.25, 0.5, 0.75, 1.0], 2),
                       "measure": np.tile(np.array(["p_error", "output"]), 4)},
                      {"k": np.arange(1, 9)}):
            new, old = head_rows(heads, values, extra), _old_head_rows(heads, values, extra)
            pd.testing.assert_frame_equal(new, old, check_exact=True)
            assert new.to_csv(index=False) == old.to_csv(index=False)
            new.insert(2, "bucket", "1-8")
            old.insert(2, "bucket", "1-8")
            assert io.markdown_table(new) == io.markdown_table(old)


def test_payload_columns_equal_the_per_value_path() -> None:
    import json
    import math

    from attnlens.report import payload

    def old_encode(series, digits=payload.EMBEDDED_DIGITS):
        if pd.api.types.is_bool_dtype(series):
            return {"kind": "bool", "values": [bool(v) for v in series.tolist()]}
        if pd.api.types.is_numeric_dtype(series):
            values = series.to_numpy(dtype=float)
            if payload._is_integral(values):
                return {"kind": "int", "values": [int(v) if math.isfinite(v) else None
                                                  for v in values.tolist()]}
            return {"kind": "num", "values": [float(f"{v:.{digits}g}") if math.isfinite(v)
                                              else None for v in values.tolist()]}
        raise AssertionError("numeric columns only")

    rng = np.random.default_rng(2)
    columns = [pd.Series(np.arange(-5, 5)), pd.Series([1.0, np.nan, -3.0, 2.0**52]),
               pd.Series([1.0, np.inf, 4.0]), pd.Series(rng.normal(size=50) * 1e-7),
               pd.Series([0.1234567, -np.inf, np.nan, 5e300]),
               pd.Series(np.array([1.5, 2.5], dtype=np.float32)),
               pd.Series(np.array([3, 4], dtype=np.uint8)), pd.Series([True, False]),
               pd.Series(pd.array([1, None, 3], dtype="Int64"))]
    for column in columns:
        new = payload.encode_column(column)
        assert json.dumps(new) == json.dumps(old_encode(column))
        assert [type(v) for v in new["values"]] == [type(v) for v in old_encode(column)["values"]]


def test_punctuation_ids_read_once_per_vocabulary() -> None:
    from attnlens.measures.heads.head_stats import punctuation_ids

    class Vocab:
        def __init__(self) -> None:
            self.vocab, self.reads = {"a": 0, ",": 1, "##.": 2, "[CLS]": 3, "?!": 4}, 0

        def get_vocab(self):
            self.reads += 1
            return dict(self.vocab)

        def __len__(self) -> int:
            return len(self.vocab)

    class Tok:
        def __init__(self) -> None:
            self.hf, self.special_ids = Vocab(), {3}

    tok = Tok()
    first = punctuation_ids(tok)
    first.add(99)  # a caller's copy: the cache is not touched
    assert punctuation_ids(tok) == {1, 2, 4} and tok.hf.reads == 1
    tok.hf.vocab[";"] = 5  # the vocabulary grew: read again
    assert punctuation_ids(tok) == {1, 2, 4, 5} and tok.hf.reads == 2
    tok.special_ids = {3, 1}  # other special tokens: read again
    assert punctuation_ids(tok) == {2, 4, 5} and tok.hf.reads == 3


def test_payload_text_columns_equal_the_bool_checked_path() -> None:
    """fixed43: a text (``str`` dtype) column skips the all-booleans check; object columns
    keep it. Every kind of text column encodes as before."""
    import json

    from attnlens.report import payload

    def old_text(series):
        present = series.dropna()
        if len(present) and all(isinstance(v, bool | np.bool_) for v in present.tolist()):
            return {"kind": "bool",
                    "values": [None if pd.isna(v) else bool(v) for v in series.tolist()]}
        texts = [v if type(v) is str else None if pd.isna(v) else str(v)
                 for v in series.tolist()]
        distinct = list(dict.fromkeys(texts))
        if len(texts) >= payload.DICTIONARY_REPEAT * len(distinct) and len(texts) > 8:
            index = {v: i for i, v in enumerate(distinct)}
            return {"kind": "str", "dict": distinct, "codes": [index[v] for v in texts]}
        return {"kind": "str", "values": texts}

    columns = [pd.Series(pd.array(FORMULA_TEXT, dtype="str")),
               pd.Series(pd.array(["True", "False", None], dtype="str")),
               pd.Series(pd.array([None, None], dtype="str")),
               pd.Series(pd.array(["a", "b"] * 6, dtype="str")),
               pd.Series([True, None, False], dtype=object),
               pd.Series(["a|b", 1, 2.5, None, True], dtype=object),
               pd.Series(pd.Categorical(["p", "=q", "p"]))]
    for column in columns:
        assert json.dumps(payload.encode_column(column)) == json.dumps(old_text(column))
