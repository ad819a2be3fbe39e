"""Issue 29 (once32): the report's fixed costs without repeated work, same bytes.

Every table of a report is written once: a section's ``write_table`` calls are held back
until the null columns and a grouped-query model's ``kv_head`` column are joined
(``report.analyze._write_sections``). The path it replaced (each section wrote its tables,
then ``apply_null`` and ``_add_kv_heads`` rewrote 17 of them) is kept here as it was and run
beside the new one: the report folders must be the same file for file, byte for byte.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import attnlens.measures.heads.roles as roles
import attnlens.measures.heads.section as heads_section
import attnlens.report.analyze as analyze_module
from attnlens.data.corpus import Corpus
from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.model.transformer import HookedTransformer
from attnlens.report.analyze import analyze, default_sections
from attnlens.report.figure_pool import figure_pool
from attnlens.report.folder import SectionRecord
from attnlens.report.kv_heads import add_kv_head_column, grouped
from attnlens.report.null_run import NullOptions, null_value_column
from attnlens.report.sections import SectionOutput
from attnlens.runs import io, stopwatch
from attnlens.stats.bootstrap import Inference
from tests.fixtures import plain_tiny_model, tiny_model
from tests.lm_heads_toys import ORDINARY, toy_tokenizer

PROBES = dict(probe_sequences=12, probe_length=8, window=4, sink_tokens=1, controls=1)
VOLATILE = ("timings", "seconds", "created")


# The replaced path, as it was (b20fd18) ----------------------------------------------------
def _old_write_sections(model, sections, per_section, out: Path, formats, seconds):
    staging_root = Path(tempfile.mkdtemp(dir=out, prefix=".sections-"))
    outputs: list[SectionOutput] = []
    records: list[SectionRecord] = []
    try:
        write_times = []
        with figure_pool():
            for section, group in zip(sections, per_section, strict=True):
                staging = staging_root / section.name
                staging.mkdir()
                began = time.perf_counter()
                outputs.append(section.write(model, group, staging, formats))
                write_times.append(time.perf_counter() - began)
            tables_done = time.perf_counter()
        stopwatch.add("figures finished after the tables (figure workers)",
                      time.perf_counter() - tables_done)
        for section, output, spent in zip(sections, outputs, write_times, strict=True):
            tables, figures = analyze_module._file_outputs(staging_root / section.name, out,
                                                           output)
            notes = output.notes or [line.strip() for line in output.summary.splitlines()
                                     if line.strip() and not line.lstrip().startswith("|")]
            analyzers = seconds.get(f"{section.name}.analyzers", 0.0)
            seconds[f"{section.name}.write"] = spent
            records.append(SectionRecord(section.name, output.title or section.title,
                                         section.doc, tables, figures, notes,
                                         round(analyzers + spent, 2)))
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
    return outputs, records


def _old_apply_null(outputs: Sequence, sections: Sequence, result, tables_dir: Path) -> list:
    from attnlens.stats.null import add_null_columns

    changed = []
    for section, output in zip(sections, outputs, strict=True):
        if section.name not in result.sections:
            continue
        for name, table in list(output.tables.items()):
            if name not in result.tables or "layer" not in table.columns:
                continue
            doc = section.doc.table_doc(name)
            value = null_value_column(table, doc.null)
            if value is None:
                continue
            with_null = add_null_columns(table, result.tables[name], value, doc.keys)
            if "null_high" not in with_null.columns:
                continue
            output.tables[name] = with_null
            formats = ("csv", "md") if (tables_dir / f"{name}.md").exists() else ("csv",)
            io.write_table(with_null, tables_dir, name, formats=formats)
            changed.append(name)
    result.changed = changed
    return changed


def _old_add_kv_heads(model, outputs: Sequence[SectionOutput], tables_dir: Path) -> None:
    cfg = model.cfg
    heads = getattr(cfg, "heads_per_layer", None)
    kv = getattr(cfg, "kv_heads_per_layer", None)
    if not grouped(heads, kv):
        return
    for output in outputs:
        for name, table in list(output.tables.items()):
            with_kv = add_kv_head_column(table, heads, kv)
            if with_kv is table or not (tables_dir / f"{name}.csv").is_file():
                continue
            output.tables[name] = with_kv
            formats = ("csv", "md") if (tables_dir / f"{name}.md").exists() else ("csv",)
            io.write_table(with_kv, tables_dir, name, formats=formats)


def _old_path(model, sections, per_section, out, formats, seconds, null_result=None, last=(),
              beside=None):
    # ``last`` (demo34's write order) left aside: the old path wrote in report order; nothing
    # runs ``beside`` the pass without side workers
    outputs, records = _old_write_sections(model, sections, per_section, out, formats, seconds)
    if null_result is not None:
        _old_apply_null(outputs, sections, null_result, out / "tables")
    _old_add_kv_heads(model, outputs, out / "tables")
    return outputs, records


# Helpers ------------------------------------------------------------------------------------
def _encoder() -> HookedTransformer:
    return tiny_model(0)


def _grouped_query_lm() -> HookedTransformer:
    """A causal language model whose four query heads share two key/value heads."""
    return plain_tiny_model(1, n_kv_heads=2, causal=True, head="lm")


def _texts(n: int = 30, words: int = 14) -> list[str]:
    rng = np.random.default_rng(5)
    return [" ".join(f"t{i}" for i in rng.choice(ORDINARY, words - (k % 4)))
            for k in range(n)]


def _report(out: Path, model, old: bool, monkeypatch) -> Counter:
    """``analyze`` with every default section into ``out`` (the old path when ``old``); the
    number of times each table file (by its final name) was written."""
    tokenizer = toy_tokenizer()
    lm = LmHeads(LmHeadsSettings(**PROBES).check(), Inference(bootstrap=20, seed=0))
    sections = default_sections(lm=lm)
    batches = Corpus("toy words", texts=_texts()).batches(tokenizer)
    writes: Counter = Counter()
    real_open = io.atomic_open
    real_role_tests = roles.role_tests

    def counting_role_tests(*args, **kwargs):
        writes["role_tests()"] += 1
        return real_role_tests(*args, **kwargs)

    def counting_open(path, *args, **kwargs):
        if Path(path).suffix in (".csv", ".md"):
            writes[Path(path).name] += 1
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setenv("ATTNLENS_FIGURE_WORKERS", "0")
        patch.setenv("ATTNLENS_SIDE_WORKERS", "0")
        patch.setattr(io, "atomic_open", counting_open)
        patch.setattr(roles, "role_tests", counting_role_tests)
        patch.setattr(heads_section, "role_tests", counting_role_tests)
        if old:
            patch.setattr(analyze_module, "_write_sections", _old_path)
        torch.manual_seed(0)
        analyze(model, tokenizer, batches, out, sections=sections, show_progress=False,
                null=NullOptions("random-init", max_sentences=20), command="analyze",
                options={})
    return writes


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file's bytes; run.json without what a run cannot repeat (its timings), the page
    left out (it shows those timings)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name == "index.html":
            continue
        data = path.read_bytes()
        if path.name == "run.json":
            record = json.loads(data)
            for key in VOLATILE:
                record.pop(key, None)
            record["null"].pop("seconds", None)
            record["null"].pop("share_of_run", None)
            for section in record["sections"]:
                section.pop("seconds", None)
            data = json.dumps(record, sort_keys=True).encode()
        files[str(path.relative_to(folder))] = data
    return files


# Tests --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["plain", "grouped_query"])
def test_tables_written_once_give_the_folder_of_the_write_then_rewrite_path(
        kind: str, tmp_path: Path, monkeypatch) -> None:
    make = _encoder if kind == "plain" else _grouped_query_lm
    old_writes = _report(tmp_path / "old", make(), True, monkeypatch)
    new_writes = _report(tmp_path / "new", make(), False, monkeypatch)
    old, new = _folder_bytes(tmp_path / "old"), _folder_bytes(tmp_path / "new")
    assert sorted(old) == sorted(new)
    assert [name for name in old if old[name] != new[name]] == []
    run = json.loads((tmp_path / "new" / "run.json").read_text())
    assert "head_stats" in run["null"]["tables"]  # the null columns were joined
    assert run["null"]["tables"] == json.loads((tmp_path / "old" / "run.json").read_text())[
        "null"]["tables"]
    stats = pd.read_csv(tmp_path / "new" / "tables" / "head_stats.csv")
    assert {"null_mean", "null_low", "null_high"} <= set(stats.columns)
    if kind == "grouped_query":
        assert "kv_head" in stats.columns
    # The old path wrote the tables with null columns twice; the new one every file once.
    assert {n for n, k in old_writes.items() if k > 1} >= {"head_stats.csv"}
    assert max(k for n, k in new_writes.items() if n != "role_tests()") == 1
    # The heads section's role tests: once, for the model (null35: the null pass has none).
    assert new_writes["role_tests()"] == 1


def test_held_tables_keep_the_last_call_per_format_and_write_nothing(tmp_path: Path) -> None:
    first, last = pd.DataFrame({"a": [1]}), pd.DataFrame({"a": [2]})
    with io.held_tables() as held:
        paths = io.write_table(first, tmp_path, "t")
        io.write_table(last, tmp_path, "t", formats=("csv",))
        with pytest.raises(Exception, match="unknown table format"):
            io.write_table(last, tmp_path, "u", formats=("xlsx",))
    assert paths == [tmp_path / "t.csv", tmp_path / "t.md"]
    assert list(tmp_path.iterdir()) == []
    assert held["t"]["csv"][0] is last and held["t"]["md"][0] is first
    io.write_table(first, tmp_path, "t")  # outside the block: written at once
    assert (tmp_path / "t.csv").is_file()


def test_roles_from_one_table_of_tests_equal_the_recomputed_ones(sample_report: Path) -> None:
    """head_roles and role_evidence built from one ``role_tests`` (the section's new path)
    equal those that recomputed the tests for every view and table (the old path)."""
    tables = sample_report / "tables"
    positional = pd.read_csv(tables / "positional_heads.csv")
    syntactic = pd.read_csv(tables / "syntactic_accuracy.csv")
    rare = pd.read_csv(tables / "rare_words.csv")
    tests_table = pd.read_csv(tables / "role_tests.csv")
    extra = tests_table[~tests_table["role"].isin(["positional", "syntactic", "rare-word"])]
    assert not extra.empty  # the language-model roles are in the comparison too
    tests = roles.role_tests(positional, syntactic, rare, extra)
    pd.testing.assert_frame_equal(tests, roles.role_tests(positional, syntactic, rare, extra),
                                  check_exact=True)
    for view in roles.VIEWS:
        evidence = roles.role_evidence(positional, syntactic, rare, view, extra, tests)
        old_evidence = roles.role_evidence(positional, syntactic, rare, view, extra)
        pd.testing.assert_frame_equal(evidence, old_evidence, check_exact=True)
        assert not evidence.empty
        new = roles.classify_heads(positional, syntactic, rare, view, extra, evidence)
        old = roles.classify_heads(positional, syntactic, rare, view, extra)
        pd.testing.assert_frame_equal(new, old, check_exact=True)


def test_token_vocabulary_read_once_per_tokenizer() -> None:
    from attnlens.measures.rollout.rollout import token_vocabulary

    class Hf:
        def __init__(self) -> None:
            self.tokens = ["[PAD]", "a", "b"]

        def __len__(self) -> int:
            return len(self.tokens)

    class Tok:
        def __init__(self) -> None:
            self.hf, self.reads = Hf(), 0

        def decode_tokens(self, ids):
            self.reads += 1
            return [self.hf.tokens[i] for i in ids]

    tok = Tok()
    first = token_vocabulary(tok)
    first.append("x")  # a caller's own list: the cache is not touched
    assert token_vocabulary(tok) == ["[PAD]", "a", "b"] and tok.reads == 1
    tok.hf.tokens.append("c")  # the vocabulary grew: read again
    assert token_vocabulary(tok) == ["[PAD]", "a", "b", "c"] and tok.reads == 2
    assert token_vocabulary(None) is None


@pytest.mark.parametrize("label", ["float32", "float64", "int", "Int64", "category", "bool",
                                   "str", "object"])
def test_head_grid_labels_equal_the_iloc_path(label: str) -> None:
    """The head map's split labels read from the columns' arrays (``.array[i]``) print as
    the ``.iloc[i]`` cells did (tables31's path), and the grids equal the group-by path's
    (tests/test_fixed_costs_equal.py), whatever the label column's dtype."""
    from attnlens.report import heads_grid
    from tests.test_fixed_costs_equal import _old_table_grids

    rng = np.random.default_rng(1)
    layer, head = np.repeat(np.arange(2), 3), np.tile(np.arange(3), 2)
    labels = {"float32": np.array([0.1, 0.25], dtype=np.float32),
              "float64": np.array([0.1, 1 / 3]), "int": np.array([5, 7]),
              "Int64": pd.array([5, 7], dtype="Int64"),
              "category": pd.Categorical(["p", "q"]), "bool": np.array([True, False]),
              "str": pd.array(["k=1", "k=2"], dtype="str"),
              "object": np.array(["x", 2], dtype=object)}[label]
    parts = [pd.DataFrame({"layer": layer, "head": head, "measure": "m",
                           "value": rng.normal(size=6), "fraction": labels[i:i + 1].repeat(6)
                           if isinstance(labels, np.ndarray) else labels[[i] * 6]})
             for i in range(2)]
    table = pd.concat(parts, ignore_index=True)
    keys = ("fraction",)
    new = heads_grid.table_grids("t", table, keys, 2, 3)
    assert len(new) == 2
    # tables31's path (main before once32) read each label by .iloc: the same printed cells
    assert [g["label"] for g in new] == [str(table["fraction"].iloc[i]) + " m" for i in (0, 6)]
    if label != "float32":  # the group-by path upcast float32 keys (0.10000000149011612);
        # the page reads tables back from CSV, float64, so no report has such a label
        assert new == _old_table_grids("t", table, keys, 2, 3)
    wide = pd.DataFrame({"layer": layer, "head": head, "a": rng.normal(size=6),
                         "b": np.arange(6, dtype=np.float32), "flag": layer == 0})
    assert heads_grid.table_grids("w", wide, (), 2, 3) == _old_table_grids("w", wide, (), 2, 3)


def test_an_encoder_decoder_report_is_the_write_then_rewrite_paths(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Encoder-decoder reports: each attention type's copy of a table, then the combined
    table, were written before the null columns; now only the combined table, once."""
    from tests.fixtures import invoke_cli
    from tests.seq2seq_utils import tiny_bart_with_tokenizer
    from tests.test_encoder_decoder_analysis import corpus_words

    model = tmp_path / "bart"
    tiny_bart_with_tokenizer(model, corpus_words())
    folders = {}
    for name in ("old", "new"):
        with monkeypatch.context() as patch:
            patch.setenv("ATTNLENS_FIGURE_WORKERS", "0")
            patch.setenv("ATTNLENS_SIDE_WORKERS", "0")
            if name == "old":
                patch.setattr(analyze_module, "_write_sections", _old_path)
            out = tmp_path / "report"  # one path for both: run.json records it
            result = invoke_cli("analyze", str(model), "--out", str(out), "--quiet")
            assert result.exit_code == 0, result.output
        folders[name] = _folder_bytes(out.rename(tmp_path / name))
    old, new = folders["old"], folders["new"]
    assert sorted(old) == sorted(new)
    assert [name for name in old if old[name] != new[name]] == []
    stats = pd.read_csv(tmp_path / "new" / "tables" / "head_stats.csv")
    assert {"attention", "null_high"} <= set(stats.columns)
