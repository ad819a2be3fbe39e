"""Examples behind every head (issue 28 item 2): the streaming top-k, the head_examples table
and the viewer pages the head cards link to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.data.batch import Batch
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.examples import EXAMPLE_COLUMNS, HeadExamples
from attnlens.measures.heads.head_stats import MEASURES
from attnlens.viewer.examples import choose_sentences
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import sentences, vocab_size, word_tokenizer

runner = CliRunner()
CLS, SEP = 1, 2


def previous_token_batch(strengths: list[float],
                         index: list[int]) -> tuple[Batch, ActivationCache]:
    """Sentences [CLS] w w w w w [SEP]; head 0 puts ``strength`` on the previous token and the
    rest on the token itself (row 3 of sentence 1 a little more), head 1 is uniform."""
    n = 7
    ids = torch.tensor([[CLS, 5, 6, 7, 8, 9, SEP]] * len(strengths))
    mask = torch.ones_like(ids)
    p = torch.full((len(strengths), 2, n, n), 1.0 / n)
    p[:, 0] = 0.0
    for b, s in enumerate(strengths):
        for i in range(n):
            if i == 0:
                p[b, 0, 0, 0] = 1.0
                continue
            p[b, 0, i, i - 1] = s
            p[b, 0, i, i] = 1.0 - s
    if len(strengths) > 1:
        p[1, 0, 3, 2], p[1, 0, 3, 3] = 0.99, 0.01  # the strongest row of sentence 1
    batch = Batch(input_ids=ids, attention_mask=mask, special_mask=(ids == CLS) | (ids == SEP),
                  extra={"index": index})
    return batch, ActivationCache({"blocks.0.attn.hook_pattern": p})


def test_the_strongest_sentences_with_their_query_key_and_window() -> None:
    examples = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=2, window=4)
    examples.update(*previous_token_batch([0.5, 0.9, 0.7], [10, 11, 12]))
    examples.update(*previous_token_batch([0.6], [13]))
    table = examples.examples(lambda ids: [f"t{i}" for i in ids])
    assert list(table.columns) == list(EXAMPLE_COLUMNS)
    top = table[(table["head"] == 0) & (table["measure"] == "to_prev")].sort_values("rank")
    assert top["sentence_index"].tolist() == [11, 12]  # means 0.918 and 0.7 (rows 2-5)
    first = top.iloc[0]
    assert (first["query"], first["key"]) == (3, 2)  # the 0.99 row, its previous token
    assert (first["query_token"], first["key_token"]) == ("t7", "t6")
    # rows 2..5 of sentence 11: 0.9, 0.99, 0.9, 0.9 (fp32 sums of 4 values: ~1e-7)
    assert first["value"] == pytest.approx((0.9 * 3 + 0.99) / 4, rel=1e-6)
    tokens = json.loads(first["window_tokens"])
    start = first["window_start"]
    assert len(tokens) == 4 and start <= 2 and start + 4 > 3
    rows = [[int(v) for v in row.split()] for row in first["window"].split(";")]
    assert rows[3 - start][2 - start] == 99  # the query's weight on its key, in percent


def test_merged_halves_keep_the_same_examples() -> None:
    whole = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=2)
    first = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=2)
    second = HeadExamples(1, 2, {CLS}, {SEP}, set(), MEASURES, k=2)
    a, b = previous_token_batch([0.5, 0.9], [0, 1]), previous_token_batch([0.7, 0.95], [2, 3])
    whole.update(*a)
    whole.update(*b)
    first.update(*a)
    second.update(*b)
    merged = first.merge(second)
    decode = (lambda ids: [str(i) for i in ids])  # noqa: E731
    pd.testing.assert_frame_equal(merged.examples(decode), whole.examples(decode))
    assert set(merged.sentence_ids) == {str(i) for i in merged.top_sentence.unique().tolist()
                                        if i >= 0}


def test_choose_sentences_covers_the_most_heads_first() -> None:
    rows = pd.DataFrame({"layer": [0, 0, 0, 1, 1], "head": [0, 1, 2, 0, 1],
                         "measure": ["m"] * 5, "rank": [1, 1, 1, 1, 2],
                         "sentence_index": [7, 7, 3, 5, 9]})
    assert choose_sentences(rows, 2) == [7, 3]
    assert choose_sentences(rows, 10) == [7, 3, 5, 9]


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("examples")
    model = folder / "model"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), model)
    word_tokenizer().hf.save_pretrained(str(model))
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(sentences(30, min_len=4)) + "\n", encoding="utf-8")
    out = folder / "report"
    result = runner.invoke(app, ["heads", str(model), "--text", str(corpus), "--out", str(out),
                                 "--quiet", "--null", "none"])
    assert result.exit_code == 0, result.output
    return out


def test_every_head_has_examples_and_linked_viewer_pages(tiny_report: Path) -> None:
    table = pd.read_csv(tiny_report / "tables" / "head_examples.csv", keep_default_na=False)
    assert len({(r.layer, r.head) for r in table.itertuples()}) == 2 * 4
    assert set(table["rank"]) == {1, 2, 3}
    linked = table[table["viewer_page"] != ""]
    assert len(linked) and set(linked["viewer_page"]) == {
        f"examples/sentence-{i}.html" for i in linked["sentence_index"]}
    for page in set(linked["viewer_page"]):
        html = (tiny_report / page).read_text(encoding="utf-8")
        text = linked[linked["viewer_page"] == page]["sentence"].iloc[0]
        assert text.split()[0] in html  # the page shows the example's sentence
        data = json.loads(re.search(r'id="attnlens-data">(.*?)</script>', html, re.S).group(1))
        # the role badges name the report's own table, not the work folder it was written in
        assert data["roles"]["source"] == "this report's tables/head_roles.csv"
        assert ".partial" not in html
    run = json.loads((tiny_report / "run.json").read_text())
    assert run["example_pages"] == len(set(linked["viewer_page"]))


def test_windows_read_each_cell_and_zero_past_the_end() -> None:
    """``_windows`` (one flat ``index_select``) against the cells read one by one."""
    examples = HeadExamples(1, 3, {CLS}, {SEP}, set(), MEASURES, window=4)
    p = torch.rand(5, 3, 6, 6)  # [batch, head, query_pos, key_pos]
    rows = torch.randint(0, 5, (2, 3, 2))  # [measure, head, k]: batch rows
    start = torch.randint(0, 6, (2, 3, 2))  # windows running past position 5 too
    window = examples._windows(p, rows, start)  # [measure, head, k, w, w]
    for m, h, r in torch.cartesian_prod(*(torch.arange(s) for s in rows.shape)).tolist():
        s, b = int(start[m, h, r]), int(rows[m, h, r])
        for i in range(4):
            for j in range(4):
                inside = s + i < 6 and s + j < 6
                expected = p[b, h, s + i, s + j] if inside else torch.tensor(0.0)
                assert torch.equal(window[m, h, r, i, j], expected)
