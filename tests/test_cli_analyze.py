"""`attnlens analyze` end to end on the embedded MiniLM, and its one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from attnlens.measures.heads.head_stats import MEASURES
from tests.fixtures import run_cli


@pytest.fixture(scope="module")
def report(sample_report: Path) -> Path:
    return sample_report


def test_analyze_writes_the_attention_statistics(report: Path) -> None:
    table = pd.read_csv(report / "tables" / "head_stats.csv")
    assert set(table.columns) >= {"layer", "head", "measure", "value"}
    measures = [*MEASURES, "sink"]  # sink: the language-model heads' (docs/lm-heads.md)
    assert set(table["measure"]) == set(measures)
    assert sorted(table["layer"].unique()) == list(range(6))
    assert sorted(table["head"].unique()) == list(range(12))
    assert len(table) == 6 * 12 * len(measures)
    value = table.set_index(["measure", "layer", "head"])["value"]
    assert value["confidence"].between(0.0, 1.0).all()
    assert value["to_cls"].between(0.0, 1.0).all() and value["to_sep"].between(0.0, 1.0).all()
    # shares of fp32 softmax rows, which sum to 1 within ~n x 1.19e-7 (n < 60 tokens: 7e-6):
    # 1e-9 was below fp32 rounding; 1e-5 (measured max of the sum 0.86)
    assert (value["to_cls"] + value["to_sep"] <= 1.0 + 1e-5).all()
    # Entropy of a distribution over n tokens lies in [0, log n]; sample sentences are < 40 tokens.
    assert value["entropy"].between(0.0, math.log(60)).all()
    assert (value["distance"] >= 0).all()
    for share in ("to_punct", "to_self", "to_prev", "to_next"):
        assert value[share].between(0.0, 1.0).all()
    # MiniLM's heads differ: some park most attention on [CLS], some almost none; at least
    # one head is near one-hot (measured on the built-in sample: to_cls 0.0-0.86, max conf 0.9996).
    assert value["to_cls"].max() > 0.6 and value["to_cls"].min() < 0.2
    assert value["confidence"].max() > 0.9


def test_analyze_writes_figures_markdown_and_html(report: Path) -> None:
    for measure in MEASURES:  # SVG by default, written by attnlens' own writer
        svg = report / "figures" / f"heads_{measure}.svg"
        assert svg.read_text().startswith('<?xml version="1.0" encoding="utf-8"?>\n<svg ')
    assert (report / "tables" / "head_stats.md").read_text().startswith("| layer | head |")
    html = (report / "index.html").read_text()
    assert "data:image/svg+xml;base64," in html and "Head roles" in html
    meta = json.loads((report / "run.json").read_text())
    assert meta["sentences"] > 0 and meta["layers_and_heads_numbered_from"] == 0
    assert not list(report.rglob(".*.tmp")) and not list(report.glob(".sections-*"))


# The figures of the default report on the sample: the stems matplotlib's PNGs had before SVG
# became the default (listed from a run of main at bfb299a), now SVG from attnlens' writer.
SAMPLE_FIGURES = {
    "asymmetry_directed", "asymmetry_patterns", "asymmetry_weights", "collapse_variants",
    "head_behaviour", "head_roles_map", "head_roles_map_uncorrected", "heads_confidence",
    "heads_distance", "heads_entropy", "heads_sink", "heads_to_cls", "heads_to_next",
    "heads_to_prev", "heads_to_punct", "heads_to_self", "heads_to_sep", "linear_error",
    "linear_interference", "linear_keys_by_length", "lm_copying", "lm_duplicate_token",
    "lm_induction", "lm_previous_token", "lm_retrieval", "lm_sink", "lm_streaming_error",
    "path_collapse", "positional_share", "qk_effective_rank", "rare_word_share",
    "rollout_layers", "rollout_sentence0_heatmap", "rollout_sentence0_readout",
    "rollout_sentence1_heatmap", "rollout_sentence1_readout", "shared_subspace",
    "sparse_window90", "sparse_window90_global", "sparse_window_curves", "spectrum_at_quarter",
    "spectrum_curves", "syntactic_dep_to_head", "syntactic_head_to_dep"
}


def test_default_figures_are_the_same_set_drawn_as_svg_without_matplotlib(report: Path) -> None:
    figures = sorted((report / "figures").iterdir())
    assert {p.stem for p in figures} == SAMPLE_FIGURES
    assert {p.suffix for p in figures} == {".svg"}
    for path in figures:  # drawn by attnlens.plots.svg (which marks its kind), not matplotlib
        assert 'data-kind="' in path.read_text(encoding="utf-8")[:400], path.name


def test_bad_text_file_is_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "never"
    result = run_cli(
        "analyze", "--text", str(tmp_path / "missing.txt"), "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "missing.txt" in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_unknown_model_is_one_line_error(tmp_path: Path) -> None:
    result = run_cli("analyze", str(tmp_path / "no-such-model"), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr


def test_cuda_without_gpu_is_one_line_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the error path cannot be reached")
    result = run_cli("analyze", "--device", "cuda", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "no CUDA GPU" in result.stderr
