"""`attnlens heads` statistics options on the real MiniLM: held-out selection on another
treebank, pooling, one-line errors checked before the model loads."""

from __future__ import annotations

import pandas as pd
import pytest
from attnlens.cli.app import app, main
from typer.testing import CliRunner


def _split_sample(tmp_path):
    """The embedded sample treebank cut in two CoNLL-U files (sentences are blank-line
    separated blocks)."""
    from importlib import resources

    text = resources.files("attnlens.data").joinpath("sample.conllu").read_text("utf-8")
    blocks = [b for b in text.split("\n\n") if b.strip()]
    first, second = tmp_path / "first.conllu", tmp_path / "second.conllu"
    first.write_text("\n\n".join(blocks[::2]) + "\n\n", encoding="utf-8")
    second.write_text("\n\n".join(blocks[1::2]) + "\n\n", encoding="utf-8")
    return first, second


def test_select_on_another_treebank_and_sentence_pooling(tmp_path):
    first, second = _split_sample(tmp_path)
    out = tmp_path / "report"
    args = ["heads", "--treebank", str(first), "--select-on", str(second), "--out", str(out),
            "-q", "--min-examples", "10", "--bootstrap", "200", "--pooling", "sentence",
            "--correction", "holm", "--no-clusters"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "HOLM correction, 200 bootstrap replicates" in result.output
    held = pd.read_csv(out / "tables" / "syntactic_heldout.csv")
    assert held["selected_on"].str.contains("second.conllu").all()
    assert held["evaluated_on"].str.contains("first.conllu").all()
    table1 = pd.read_csv(out / "tables" / "syntactic_table1.csv")
    assert {"95% CI", "held-out head", "held-out accuracy", "held-out 95% CI"} <= set(table1)
    # one notation (issue 28 item 6): heads in the table's label columns are L2H8
    assert table1["best head"].str.fullmatch(r"L\d+H\d+").all()
    held_heads = table1["held-out head"].dropna()
    assert len(held_heads) and held_heads.str.fullmatch(r"L\d+H\d+").all()
    assert (pd.read_csv(out / "tables" / "head_stats.csv")["pooling"] == "sentence").all()
    tests = pd.read_csv(out / "tables" / "role_tests.csv")
    assert {"role", "tested", "p_value", "q_value", "ci_low", "ci_high", "n_sentences",
            "n_examples"} <= set(tests)
    assert not (out / "tables" / "head_distances.csv").exists()  # --no-clusters


def test_clusters_and_behaviour_on_the_sample(tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["heads", "--out", str(out), "-q", "--bootstrap", "50"])
    assert result.exit_code == 0, result.output
    distances = pd.read_csv(out / "tables" / "head_distances.csv")
    assert len(distances) == 72 * 71 // 2 and (distances["js_divergence"] >= -1e-6).all()
    embedding = pd.read_csv(out / "tables" / "head_embedding.csv")
    assert len(embedding) == 72 and embedding["roles"].notna().all()
    classes = pd.read_csv(out / "tables" / "head_behaviour_classes.csv")
    classes = classes.set_index(["layer", "head"])
    # MiniLM's 0-2 is the previous-token head: mostly diagonal attention
    assert classes.loc[(0, 2), "dominant"] == "diagonal"
    for name in ("head_behaviour", "head_embedding", "head_distances", "head_roles_map"):
        assert (out / "figures" / f"{name}.svg").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--correction", "bonferroni"], "--correction must be one of bh, holm"),
        (["--pooling", "word"], "--pooling must be one of token, sentence"),
        (["--rare-self", "maybe"], "--rare-self must be include or exclude"),
        (["--select-fraction", "1"], "--select-fraction must lie strictly between 0 and 1"),
        (["--select-on", "missing.conllu"], "--select-on file missing.conllu does not exist"),
    ],
)
def test_statistics_option_errors_are_one_line(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["attnlens", "heads", *args, "--out", "out", "-q"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("Error: ") and message in err and "\n" not in err


def test_minilm_statistics_on_ud_subset(minilm):
    """300 sentences of UD EWT dev through the heads section: intervals hold their estimates,
    accuracies do not depend on the bootstrap, MiniLM's previous-token head is positional."""
    import torch

    from attnlens.data.conllu import read_conllu
    from attnlens.data.words import treebank_batches
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.stats.bootstrap import Inference
    from attnlens.stream.runner import run_analyzers
    from tests.conftest import shared_file

    model, tokenizer = minilm
    torch.set_num_threads(2)
    sentences = read_conllu(shared_file("ud-ewt/en_ewt-ud-dev.conllu"))[:300]
    batches = treebank_batches(tokenizer, sentences, batch_size=16, max_length=512)
    section = HeadRolesSection(min_examples=100, clusters=True)
    analyzers = section.analyzers(model, tokenizer)
    run_analyzers(model, batches, analyzers, show_progress=False)
    tables = section.tables(model, analyzers)
    # replicates are fp32 matrix products of exact counts: within 1e-6 of the fp64 estimate
    for name, value in (("syntactic_accuracy", "accuracy"), ("positional_heads", "share"),
                        ("rare_words", "share_rarest"), ("head_stats", "value"),
                        ("head_behaviour", "value"), ("syntactic_heldout", "heldout_accuracy")):
        t = tables[name].dropna(subset=["ci_low"])
        assert len(t) and (t["ci_low"] <= t[value] + 1e-6).all(), name
        assert (t[value] <= t["ci_high"] + 1e-6).all(), name
    positional = tables["positional_heads"]
    assert positional.loc[positional["positional"], ["layer", "head"]].values.tolist() == [[0, 2]]
    best = tables["syntactic_best"].set_index(["relation", "direction"])
    det = tables["syntactic_accuracy"].query(
        "relation == 'det' and direction == 'dep->head' and layer == 2 and head == 8")
    assert best.loc[("det", "dep->head"), ["layer", "head"]].tolist() == [2, 8]
    assert det["excess_ci_low"].item() > 0  # beats the +1 baseline with its whole interval
    section.inference = Inference(bootstrap=0)
    for analyzer in analyzers:
        if hasattr(analyzer, "inference"):
            analyzer.inference = section.inference
    plain = section.tables(model, analyzers)
    assert plain["syntactic_accuracy"]["accuracy"].equals(tables["syntactic_accuracy"]["accuracy"])
    assert plain["syntactic_accuracy"]["ci_low"].isna().all()
