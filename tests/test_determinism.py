"""Two runs with the same options write byte-identical tables and run records (timing fields
apart), so a result can be checked by rerunning it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.fixtures import run_cli
from tests.pruning_toys import write_pairs

# Fields allowed to differ: wall-clock times, the creation time and the command line, whose
# --out differs between the two runs.
TIMING_FIELDS = {"seconds", "timings", "created", "command"}


def _record(path: Path) -> dict:
    record = {k: v for k, v in json.loads(path.read_text()).items() if k not in TIMING_FIELDS}
    if isinstance(record.get("options"), dict):
        record["options"] = {k: v for k, v in record["options"].items() if k != "out"}
    for section in record.get("sections", []):
        section.pop("seconds", None)
    if isinstance(record.get("null"), dict):  # the null model's wall-clock cost
        record["null"] = {k: v for k, v in record["null"].items()
                          if k not in ("seconds", "share_of_run")}
    return record


def _same_folders(a: Path, b: Path, timed_csv: dict[str, str] | None = None,
                  skip: frozenset[str] = frozenset()) -> list[str]:
    """Compare every table of two run folders (a report keeps them in tables/)."""
    timed_csv = timed_csv or {}
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*"))
    assert names == sorted(str(p.relative_to(b)) for p in b.rglob("*"))
    tables = [n for n in names if n.endswith((".csv", ".md"))]
    for name in tables:
        if name in skip:
            continue
        if name in timed_csv:
            left = pd.read_csv(a / name, keep_default_na=False).drop(columns=timed_csv[name])
            right = pd.read_csv(b / name, keep_default_na=False).drop(columns=timed_csv[name])
            pd.testing.assert_frame_equal(left, right, check_exact=True)
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert _record(a / "run.json") == _record(b / "run.json")
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    return tables


def test_two_analyze_runs_write_identical_tables(tmp_path):
    for out in ("a", "b"):
        run_cli("analyze", "--out", out, "--quiet", cwd=tmp_path, timeout=900, check=True)
    tables = _same_folders(tmp_path / "a", tmp_path / "b")
    # every section's CSV and Markdown tables were compared
    assert len(tables) >= 40 and all(t.startswith("tables/") for t in tables)


def test_two_prune_runs_write_identical_tables(tmp_path):
    from transformers import BertConfig, BertModel

    from tests.parity_utils import TINY, save_tiny
    from tests.pruning_toys import vocab_size, word_tokenizer

    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), tmp_path / "tiny")
    word_tokenizer().hf.save_pretrained(str(tmp_path / "tiny"))
    write_pairs(tmp_path / "pairs.csv", 32)
    for out in ("a", "b"):
        run_cli("prune", "tiny", "--metric", "sts", "--pairs", "pairs.csv", "--step", "0.25",
              "--max-fraction", "0.75", "--batch-size", "8", "--rescore", "--out", out,
              "--quiet", cwd=tmp_path, timeout=900, check=True)
    # prune_curve's last column, "seconds", is each step's wall-clock time (also in the .md)
    md_a = (tmp_path / "a" / "prune_curve.md").read_text().splitlines()
    md_b = (tmp_path / "b" / "prune_curve.md").read_text().splitlines()
    assert [r.rsplit("|", 2)[0] for r in md_a] == [r.rsplit("|", 2)[0] for r in md_b]
    tables = _same_folders(tmp_path / "a", tmp_path / "b", {"prune_curve.csv": "seconds"},
                           skip=frozenset({"prune_curve.md"}))
    assert "prune_scores.csv" in tables
