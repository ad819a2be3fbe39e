"""fixed41 (issue 29): `analyze` builds the report page in a forked child while it runs the
example pages' forward passes; the pages' table column is written first, so the page links
them, and every file is the same bytes as with the page built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.report import side_work
from attnlens.viewer.examples import start_example_pages
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import sentences, vocab_size, word_tokenizer

runner = CliRunner()
PAGE_WAIT = "waited for: page"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny BERT's folder and a 30-sentence text corpus."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("fixed41")
    model = folder / "model"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), model)
    word_tokenizer().hf.save_pretrained(str(model))
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(sentences(30, min_len=4)) + "\n", encoding="utf-8")
    return model, corpus


def _heads_report(inputs, out: Path, monkeypatch, forked: bool) -> dict:
    model, corpus = inputs
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "1" if forked else "0")
    monkeypatch.setenv("ATTNLENS_FIGURE_WORKERS", "0")
    result = runner.invoke(app, ["heads", str(model), "--text", str(corpus), "--out", str(out),
                                 "--quiet", "--null", "none"])
    assert result.exit_code == 0, result.output
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.parent.name in ("tables", "examples")}


def test_the_page_built_beside_the_example_pages_gives_the_same_files(inputs, tmp_path,
                                                                      monkeypatch):
    import torch

    if not side_work.side_workers_allowed(torch.nn.Linear(1, 1)):
        pytest.skip("side workers fork on Linux with 2+ CPUs")
    here = _heads_report(inputs, tmp_path / "here", monkeypatch, forked=False)
    beside = _heads_report(inputs, tmp_path / "beside", monkeypatch, forked=True)
    assert PAGE_WAIT in beside["timings"]["fixed costs"]  # the page came from a child
    assert PAGE_WAIT not in here["timings"]["fixed costs"]
    assert beside["example_pages"] == here["example_pages"] > 0
    files = _files(tmp_path / "here")
    assert any(name.startswith("examples/") for name in files)
    assert files == _files(tmp_path / "beside")
    page = (tmp_path / "beside" / "index.html").read_text(encoding="utf-8")
    assert "examples/sentence-" in page  # the table's column was there when it was built


def test_the_column_is_written_before_the_pages(inputs, tmp_path, monkeypatch):
    """``start_example_pages`` records the pages in the table and writes none of them;
    ``finish()`` writes exactly those the table names."""
    import pandas as pd

    out = tmp_path / "report"
    _heads_report(inputs, out, monkeypatch, forked=False)
    table = out / "tables" / "head_examples.csv"
    pd.read_csv(table).drop(columns="viewer_page").to_csv(table, index=False)
    for page in (out / "examples").iterdir():
        page.unlink()
    from attnlens.data.tokenizer import Tokenizer
    from attnlens.loaders import load_model

    model = load_model(str(inputs[0]))
    pending = start_example_pages(model, Tokenizer.from_pretrained(str(inputs[0])), out)
    named = {p for p in pd.read_csv(table, keep_default_na=False)["viewer_page"] if p}
    assert len(named) == pending.count > 0
    assert not any((out / "examples").iterdir())
    written = pending.finish()
    assert {str(p.relative_to(out)) for p in written} == named
