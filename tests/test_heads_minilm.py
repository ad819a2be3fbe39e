"""Head roles on the real MiniLM: the `heads` command, and UD English EWT dev baselines."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app, main
from typer.testing import CliRunner

from attnlens.data.conllu import read_conllu
from attnlens.data.words import treebank_batches
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.stream.runner import run_analyzers
from tests.conftest import shared_file

UD_DEV = "ud-ewt/en_ewt-ud-dev.conllu"
CHECKED = ("nsubj", "obj", "amod", "advmod", "det")


def independent_offsets(
    path: Path, limit: int | None = None, skip: dict[int, set[int]] | None = None
) -> dict[str, Counter]:
    """head - dependent offsets per relation, read straight from the CoNLL-U lines; arcs
    touching a word of ``skip[sentence]`` (word ids) are left out."""
    offsets: dict[str, Counter] = defaultdict(Counter)
    sentences = 0
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln and not ln.startswith("#")]
        if not lines:
            continue
        if limit is not None and sentences == limit:
            break
        left_out = (skip or {}).get(sentences, set())
        sentences += 1
        words = [ln.split("\t") for ln in lines if ln.split("\t")[0].isdigit()]
        for cols in words:
            if cols[6] != "0" and not {int(cols[0]), int(cols[6])} & left_out:
                # word ids run 1..n over the basic words, so id differences are offsets
                offsets[cols[7]][int(cols[6]) - int(cols[0])] += 1
    return offsets


def tokenless_words(tokenizer, sentences) -> dict[int, set[int]]:
    """Per sentence, the word ids (1-based) in which no WordPiece token of the sentence's
    text starts: their characters lie in a token of the word before ("its" read as one token
    for the treebank words "it" + "s"). Computed from the tokenizer's offsets alone."""
    found = {}
    for n, sentence in enumerate(sentences):
        offsets = tokenizer.hf(sentence.text, return_offsets_mapping=True)["offset_mapping"]
        starts = [s for s, e in offsets if e > s]
        found[n] = {w + 1 for w, (a, b) in enumerate(sentence.spans)
                    if not any(a <= s < b for s in starts)}
    return found


def independent_baseline(counts: Counter) -> float:
    return max(counts.values()) / sum(counts.values())


def test_heads_command_on_the_embedded_sample(tmp_path):
    out = tmp_path / "report"
    args = ["heads", "--out", str(out), "--quiet", "--min-examples", "20"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Best head per relation" in result.output
    for name in ("head_stats", "positional_heads", "syntactic_table1", "rare_words", "head_roles"):
        assert (out / "tables" / f"{name}.csv").is_file()
        assert (out / "tables" / f"{name}.md").is_file()
    assert (out / "figures" / "head_roles_map.svg").is_file() and (out / "index.html").is_file()
    roles = pd.read_csv(out / "tables" / "head_roles.csv")
    assert len(roles) == 6 * 12 and roles["layer"].min() == 0 and roles["head"].min() == 0
    stats = pd.read_csv(out / "tables" / "head_stats.csv").pivot_table(
        index=["layer", "head"], columns="measure", values="value"
    )
    assert ((stats["confidence"] > 0) & (stats["confidence"] <= 1)).all()
    targets = stats[["to_cls", "to_sep", "to_punct"]].sum(axis=1)
    # fp32 softmax rows sum to 1 within ~n x 1.19e-7 (n < 60 tokens: 7e-6); measured max 0.89
    assert (targets <= 1 + 1e-5).all()
    table = pd.read_csv(out / "tables" / "syntactic_table1.csv")
    assert {"det", "nsubj", "all relations"} <= set(table["relation"])
    assert set(table["direction"]) == {"dep->head", "head->dep"}


def test_heads_command_on_plain_text(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.\nA zebra ate my homework!\n")
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["heads", "--text", str(text), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "syntactic heads not measured" in result.output
    assert not (out / "tables" / "syntactic_table1.csv").exists()
    rare = pd.read_csv(out / "tables" / "rare_words.csv")
    assert rare["sentences"].iloc[0] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--text", "a.txt", "--treebank", "b.conllu"], "either --text or --treebank"),
        (["--parse"], "--parse parses a plain-text file"),
        (["--treebank", "missing.conllu"], "does not exist"),
    ],
)
def test_heads_command_errors_are_one_line(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["attnlens", "heads", *args, "--out", "out", "-q"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("Error: ") and message in err and "\n" not in err


def test_parse_without_spacy_is_a_clear_error(tmp_path, monkeypatch, capsys):
    try:  # spaCy is an optional extra; this checks the message when it is absent
        import spacy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("spaCy is installed here; the missing-spaCy message cannot be checked")
    text = tmp_path / "t.txt"
    text.write_text("The cat sat.\n")
    monkeypatch.setattr("sys.argv", ["attnlens", "heads", "--text", str(text), "--parse",
                                     "--out", str(tmp_path / "o"), "-q"])
    with pytest.raises(SystemExit):
        main()
    assert "needs spaCy" in capsys.readouterr().err


def test_ud_baselines_match_an_independent_count_on_all_sentences(minilm):
    """The fixed-offset baselines depend only on the treebank: count them over all 2,001
    sentences through the analyzer (uniform attention stands in for the model) and compare
    with a plain-Python count of the file."""
    path = shared_file(UD_DEV)
    _, tokenizer = minilm
    sentences = read_conllu(path)
    assert len(sentences) == 2001
    batches = treebank_batches(tokenizer, sentences, batch_size=64, max_length=512)
    assert all(n == len(w) for b in batches for n, w in zip(b.extra["n_words"], b.words,
                                                            strict=True))  # nothing truncated
    # The model reads each sentence's text: arcs of words without a token of their own
    # (52 of 25,147 words: "its" for it + s, "cannot" for can + not...) are not counted.
    skip = tokenless_words(tokenizer, sentences)
    assert {i: {w + 1 for w in un} for b in batches
            for i, un in zip(b.extra["index"], b.extra["unaligned"], strict=True)} == skip
    assert sum(len(v) for v in skip.values()) == 52
    analyzer = SyntacticHeads(1, 1, min_examples=1)
    for batch in batches:
        length = batch.input_ids.shape[1]
        uniform = batch.attention_mask[:, None, None, :].float().expand(-1, 1, length, -1)
        uniform = uniform / batch.attention_mask.sum(1)[:, None, None, None]
        analyzer.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": uniform}))
    base = analyzer.result()["syntactic_baselines"].set_index(["relation", "direction"])
    expected = independent_offsets(path, skip=skip)
    for relation in CHECKED:
        row = base.loc[(relation, "dep->head")]
        assert row["examples"] == sum(expected[relation].values())
        # exact: both are ratios of the same integer counts (approx default rel 1e-6)
        assert row["baseline"] == pytest.approx(independent_baseline(expected[relation]))
        best_offset = expected[relation].most_common(1)[0][0]
        assert row["baseline_offset"] == best_offset
        assert base.loc[(relation, "head->dep"), "baseline_offset"] == -best_offset


def test_minilm_on_ud_subset(minilm):
    """The real run on the first 150 sentences (the full 2,001: see the README command)."""
    path = shared_file(UD_DEV)
    model, tokenizer = minilm
    torch.set_num_threads(2)
    sentences = read_conllu(path)[:150]
    batches = treebank_batches(tokenizer, sentences, batch_size=16, max_length=512)
    (syntactic,) = run_analyzers(
        model, batches, [SyntacticHeads.for_model(model, min_examples=1)], show_progress=False
    )
    tables = syntactic.result()
    base = tables["syntactic_baselines"].set_index(["relation", "direction"])
    expected = independent_offsets(path, limit=150, skip=tokenless_words(tokenizer, sentences))
    for relation in CHECKED:  # exact count ratios, as above
        assert base.loc[(relation, "dep->head"), "baseline"] == pytest.approx(
            independent_baseline(expected[relation])
        )
    best = tables["syntactic_best"].set_index(["relation", "direction"])
    # MiniLM has a head that finds determiners' nouns far better than "always the next word"
    det = best.loc[("det", "dep->head")]
    assert det["accuracy"] >= det["baseline"] + 0.10
    accuracy = tables["syntactic_accuracy"]["accuracy"]
    assert ((accuracy >= 0) & (accuracy <= 1)).all()
