"""Example pages of `attnlens heads` read at most the run's --max-length, and at most the
whole-matrix limit (issue 27): a page holds one layer's whole pattern at a time, so a long
document's page at the model's trained length (16,384 tokens) took 10 GiB in
benchmarks/long_context.py while the analysis itself read 4,096 tokens in query blocks."""

from __future__ import annotations

from pathlib import Path

from attnlens.cli import runner

from attnlens.model.query_blocks import QueryBlocks


class Model:
    def __init__(self, limit: int) -> None:
        self.query_blocks = QueryBlocks(rows=64, whole_matrix_limit=limit)


def test_example_pages_read_the_run_length_at_most_the_whole_matrix_limit():
    assert runner.example_length(Model(4096), 16384) == 4096
    assert runner.example_length(Model(4096), 512) == 512
    assert runner.example_length(Model(4096), None) == 4096
    assert runner.example_length(object(), 300) == 300  # a model without query blocks


def test_example_pages_get_that_length(monkeypatch, tmp_path: Path):
    import attnlens.viewer.examples as examples

    seen = {}

    def write(model, tokenizer, out, max_length=None):
        seen["max_length"] = max_length
        return []

    monkeypatch.setattr(examples, "write_example_pages", write)
    assert runner._example_pages(Model(4096), None, tmp_path, max_length=16384) == []
    assert seen["max_length"] == 4096
