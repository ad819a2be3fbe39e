"""The benchmarks' records and the README's performance table built from them (issue 29)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_record  # noqa: E402
import readme_table  # noqa: E402

MACHINE = {"cpu": "Test CPU 3000", "cores": 2, "threads": 2, "cuda": None}


def figure(key, measured, met, command, target="<= 1.3", time="2026-11-27T15:05:00Z", **extra):
    return {"kind": "figure", "key": key, "figure": f"figure {key}", "target": target,
            "measured": measured, "met": met, "command": command, "time": time,
            "machine": MACHINE, **extra}


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


RUN = [
    {"kind": "start", "time": "2026-11-27T15:00:00Z", "machine": MACHINE},
    figure("a", "1.10 (11.0 s vs 10.0 s)", True, "python benchmarks/a.py --threads 2"),
    figure("b", "3.00 (13.73 s vs 4.57 s)", False, "python benchmarks/a.py --threads 2"),
    figure("extra", "0.5 s", None, "python benchmarks/extra.py", target="none"),
    {"kind": "end", "time": "2026-11-27T15:17:05Z", "machine": MACHINE},
]
GPU = [
    figure("corpus_pass", "20.2 (4.78 s vs 0.24 s)", False, "python benchmarks/c.py --device cuda",
           target="<= 1.2", time="2026-11-27", device="NVIDIA H200",
           source="transcribed from docs/performance.md"),
    figure("corpus_pass", "9.9 (1.00 s vs 0.10 s)", False, "python benchmarks/c.py --device cuda",
           target="<= 1.2", time="2026-11-28T10:00:00Z", machine={**MACHINE, "cuda": "NVIDIA X"}),
]
EXPECTED_SECTION = """
Every row but the GPU ones comes from one `make bench` run on 2026-11-27 (15:00-15:17 UTC, \
17 min 5 s) on Test CPU 3000 (2 cores), 2 threads: each benchmark recorded what it printed in \
`benchmarks/results/bench.jsonl` and `benchmarks/readme_table.py` wrote this table from it. \
Ratios are taken in one process against a baseline measured in the same run.

| figure | target | measured | command |
|---|---|---|---|
| figure a | <= 1.3 | **1.10** (11.0 s vs 10.0 s) | `python benchmarks/a.py --threads 2` |
| figure b | <= 1.3 | **3.00, not met** (13.73 s vs 4.57 s) | same |
| missing row |  | **not measured in this run** | `python benchmarks/missing.py` |
| figure extra | none | **0.5 s** | `python benchmarks/extra.py` |
| parity with HF eager, fp32 | <= 1e-5 tiny models, <= 1e-4 MiniLM | see the table under \
Models (a test, not a benchmark) | `pytest tests/test_parity_*.py` |
| figure corpus_pass: NVIDIA H200, 2026-11-27 (transcribed) | <= 1.2 | **20.2, not met** \
(4.78 s vs 0.24 s) | `python benchmarks/c.py --device cuda` |
| figure corpus_pass: NVIDIA X, 2026-11-28 | <= 1.2 | **9.9, not met** (1.00 s vs 0.10 s) \
| `python benchmarks/c.py --device cuda` |

GPU rows: the records of `benchmarks/gpu_check.sh` (`benchmarks/results/gpu.jsonl`, the \
latest per figure and card), each row with its card and date. Rows marked (transcribed) were \
measured before the records existed and copied by hand from \
[performance.md](docs/performance.md#gpu). Where the time goes, the floor beside each ratio \
and what is left: [docs/performance.md](docs/performance.md).
"""
README = """# attnlens

Intro text.

<!-- section:performance -->
| old | table |
<!-- /section:performance -->

Text after, untouched.
"""


@pytest.fixture
def small_expected(monkeypatch):
    """Three expected rows (a, b and one no record has) instead of make bench's dozen."""
    monkeypatch.setattr(readme_table, "EXPECTED", {
        "a": ("figure a", "python benchmarks/a.py"), "b": ("figure b", "python benchmarks/a.py"),
        "missing": ("missing row", "python benchmarks/missing.py")})


def test_record_writes_nothing_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(bench_record.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert bench_record.record("f", "<= 1", "0.5", True, "python x.py") is False
    assert list(tmp_path.iterdir()) == []


def test_record_appends_one_line_per_figure(tmp_path, monkeypatch):
    path = tmp_path / "results" / "bench.jsonl"
    monkeypatch.setenv(bench_record.ENV, str(path))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert bench_record.record("the figure", "<= 1.3", "3.00 (13.73 s vs 4.57 s)", False,
                               "python benchmarks/x.py", key="x", rounds=3)
    bench_record.record("second", ">= 3x", "3.5x", None, "python benchmarks/y.py")
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert {k: first[k] for k in ("kind", "key", "figure", "target", "measured", "met",
                                  "command", "rounds")} == {
        "kind": "figure", "key": "x", "figure": "the figure", "target": "<= 1.3",
        "measured": "3.00 (13.73 s vs 4.57 s)", "met": False,
        "command": "python benchmarks/x.py", "rounds": 3}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["time"])
    assert set(first["machine"]) == {"cpu", "cores", "threads", "cuda"}
    assert first["machine"]["cpu"] and first["machine"]["cores"] >= 1
    # this test process imported torch (conftest): its thread count, else OMP_NUM_THREADS
    torch = sys.modules.get("torch")
    assert first["machine"]["threads"] == (torch.get_num_threads() if torch else 2)
    assert second["key"] == "second" and second["met"] is None  # key defaults to the figure


def test_start_and_end_lines(tmp_path, monkeypatch):
    path = tmp_path / "bench.jsonl"
    monkeypatch.setenv(bench_record.ENV, str(path))
    assert bench_record.main(["start"]) == 0 and bench_record.main(["end"]) == 0
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == [
        "start", "end"]
    assert bench_record.main(["middle"]) == 2


def test_section_from_hand_written_records(small_expected):
    assert readme_table.section(RUN, GPU) == EXPECTED_SECTION


def test_the_latest_record_of_a_figure_wins_and_no_gpu_file_means_no_gpu_rows(small_expected):
    again = figure("a", "1.20 (12.0 s vs 10.0 s)", True, "python benchmarks/a.py --threads 2")
    text = readme_table.section([*RUN[:-1], again, RUN[-1]], None)
    assert "**1.20** (12.0 s vs 10.0 s)" in text and "1.10" not in text
    assert "GPU" not in text.split("|---|---|---|---|")[1].replace("the GPU ones", "")


def test_a_run_without_its_end_line_says_so(small_expected):
    assert "from 15:00 UTC, unfinished: no end line" in readme_table.section(RUN[:-1])


def test_write_keeps_the_markers_and_the_text_outside(tmp_path, small_expected):
    records = write_jsonl(tmp_path / "bench.jsonl", RUN)
    gpu = write_jsonl(tmp_path / "gpu.jsonl", GPU)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    paths = ["--records", str(records), "--gpu", str(gpu), "--readme", str(readme)]
    assert readme_table.main(["--check", *paths]) == 1  # the old table differs
    assert readme_table.main(paths) == 0
    text = readme.read_text()
    before, rest = text.split("<!-- section:performance -->\n")
    body, after = rest.split("<!-- /section:performance -->")
    assert before == README.split("<!-- section:performance -->")[0]
    assert after == README.split("<!-- /section:performance -->")[1]
    # the sentence names the records it was built from
    assert body == EXPECTED_SECTION.replace("benchmarks/results/bench.jsonl", str(records))
    assert readme_table.main(["--check", *paths]) == 0


def test_check_detects_a_drift(tmp_path, small_expected):
    records = write_jsonl(tmp_path / "bench.jsonl", RUN)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    paths = ["--records", str(records), "--gpu", str(tmp_path / "none.jsonl"),
             "--readme", str(readme)]
    readme_table.main(paths)
    assert readme_table.main(["--check", *paths]) == 0
    readme.write_text(readme.read_text().replace("**1.10**", "**1.01**"))  # a hand edit
    assert readme_table.main(["--check", *paths]) == 1
    readme_table.main(paths)
    write_jsonl(records, [RUN[0], figure("a", "1.11 (11.1 s vs 10.0 s)", True, "x"), RUN[-1]])
    assert readme_table.main(["--check", *paths]) == 1  # new records, README not rewritten


def test_print_writes_nothing(tmp_path, capsys, small_expected):
    records = write_jsonl(tmp_path / "bench-quick.jsonl", RUN)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert readme_table.main(["--print", "--records", str(records), "--gpu",
                              str(tmp_path / "none.jsonl"), "--readme", str(readme)]) == 0
    assert readme.read_text() == README
    assert "**3.00, not met** (13.73 s vs 4.57 s)" in capsys.readouterr().out


def test_missing_records_file_is_an_error(tmp_path):
    assert readme_table.main(["--check", "--records", str(tmp_path / "none.jsonl")]) == 1


def test_every_expected_row_has_a_benchmark_that_records_it():
    sources = "".join(p.read_text() for p in (ROOT / "benchmarks").glob("*.py"))
    keys = re.findall(r'key=(f?)"([^"]+)"', sources)  # f-strings: the part before "{"
    missing = [k for k in readme_table.EXPECTED
               if not any(k == key or (f and k.startswith(key.split("{")[0]))
                          for f, key in keys)]
    assert not missing


def test_transcribed_gpu_records_say_where_they_come_from():
    lines = readme_table.read_records(readme_table.GPU_RECORDS)
    transcribed = [line for line in lines if line.get("source")]
    assert transcribed, "gpu.jsonl holds the GPU figures measured before the records"
    assert {line["source"] for line in transcribed} == {"transcribed from docs/performance.md"}
    assert {(line["key"], line["device"]) for line in transcribed} == {
        ("corpus_pass", "NVIDIA H200"), ("long.gpu", "NVIDIA H100 80GB HBM3"),
        ("long.gpu", "NVIDIA H200")}


def test_readme_matches_the_committed_records():
    if not readme_table.RECORDS.is_file():
        pytest.skip(f"{readme_table.RECORDS} does not exist yet: no full `make bench` run has "
                    "been committed")
    assert readme_table.main(["--check"]) == 0, "run python benchmarks/readme_table.py"
