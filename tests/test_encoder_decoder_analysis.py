"""Analyzers on encoder-decoder models: per attention type, one pass, an `attention` column."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.model.encoder_decoder import ATTENTION_TYPES
from attnlens.stream.attention_types import run_by_attention, with_attention_column
from attnlens.stream.attention_view import AttentionView
from attnlens.stream.runner import run_analyzers
from tests.fixtures import invoke_cli
from tests.seq2seq_utils import tiny_bart_with_tokenizer


def corpus_words() -> list[str]:
    from attnlens.data.conllu import read_conllu

    words = set()
    for sentence in read_conllu(Path(__import__("attnlens").data.__file__).parent
                                / "sample.conllu"):
        words.update(sentence.words)
    return sorted(words)


@pytest.fixture(scope="module")
def tiny_bart(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bart")
    tiny_bart_with_tokenizer(path, corpus_words())
    return path


@pytest.fixture(scope="module")
def loaded(tiny_bart):
    from attnlens.loaders import load

    return load(tiny_bart)


def one_hot_at_offset(pattern: torch.Tensor, offset: int) -> torch.Tensor:
    """Every row puts all its weight on key ``query + offset`` (clamped into the matrix)."""
    q, k = pattern.shape[-2:]
    target = (torch.arange(q) + offset).clamp(0, k - 1)
    out = torch.zeros_like(pattern)
    out[..., torch.arange(q), target] = 1.0
    return out


def test_known_patterns_reach_the_right_attention_type(loaded):
    """Cross layer 1 forced to offset 0, decoder layer 0 to offset -1: the tables say so."""
    from attnlens.data.text import sample_sentences, text_batches

    model, tokenizer = loaded
    batches = text_batches(tokenizer, sample_sentences()[:12], batch_size=4)
    analyzers = []
    for attention in ATTENTION_TYPES:
        view = AttentionView(model, attention)
        for analyzer in (HeadStats.for_model(view, tokenizer), PositionalHeads.for_model(view)):
            analyzer.attention = attention
            analyzers.append(analyzer)
    forced = [
        ("decoder.blocks.1.cross_attn.hook_pattern", lambda p, hook: one_hot_at_offset(p, 0)),
        ("decoder.blocks.0.attn.hook_pattern", lambda p, hook: one_hot_at_offset(p, -1)),
    ]
    with model.hooks(fwd_hooks=forced):
        run_analyzers(model, batches, analyzers, show_progress=False)
    stats = with_attention_column({a.attention: a.result() for a in analyzers[::2]})
    table = stats["head_stats"].set_index(["attention", "layer", "head", "measure"])["value"]
    for head in range(4):
        assert table["cross", 1, head, "to_self"] == pytest.approx(1.0, abs=1e-12)
        assert table["decoder", 0, head, "to_prev"] == pytest.approx(1.0, abs=1e-12)
        assert table["encoder", 0, head, "to_self"] < 0.9  # the hooks touched no other type
        assert table["cross", 0, head, "to_self"] < 0.9
    positional = pd.concat(
        [a.result()["positional_heads"].assign(attention=a.attention) for a in analyzers[1::2]]
    ).set_index(["attention", "layer", "head"]).sort_index()
    assert (positional.loc[("cross", 1), "best_offset"] == 0).all()
    assert (positional.loc[("cross", 1), "share"] == 1.0).all()
    assert (positional.loc[("decoder", 0), "best_offset"] == -1).all()


def test_runner_matches_caches_taken_by_hand(loaded):
    """Layerwise feeding through views equals update() on the model's own cached patterns."""
    from attnlens.data.text import sample_sentences, text_batches

    model, tokenizer = loaded
    batches = text_batches(tokenizer, sample_sentences()[:10], batch_size=5)
    streamed = {}
    for attention in ATTENTION_TYPES:
        streamed[attention] = HeadStats.for_model(AttentionView(model, attention), tokenizer)
        streamed[attention].attention = attention
    run_by_attention(model, batches, list(streamed.values()), show_progress=False)
    # every pattern cached, as in the run (a hooked pattern takes the manual path everywhere)
    everything = [n for n in model.hook_dict if n.endswith("hook_pattern")]
    caches = [model.run_with_cache(**b.model_inputs(), names_filter=everything)[1]
              for b in batches]
    for attention in ATTENTION_TYPES:
        view = AttentionView(model, attention)
        by_hand = HeadStats.for_model(view, tokenizer)
        names = {view.real_name(n): n for n in by_hand.hook_names(view)}
        for batch, cache in zip(batches, caches, strict=True):
            own = ActivationCache({names[k]: v for k, v in cache.items() if k in names})
            by_hand.update(view.batch(batch), own)
        assert torch.equal(streamed[attention].sums, by_hand.sums), attention


def test_untagged_analyzers_are_refused(loaded):
    from attnlens.data.text import sample_sentences, text_batches

    model, tokenizer = loaded
    batches = text_batches(tokenizer, sample_sentences()[:2])
    with pytest.raises(ConfigError, match=r"needs \.attention"):
        run_analyzers(model, batches, [PositionalHeads(3, 4)], show_progress=False)


def test_states_of_different_attention_types_do_not_merge():
    a, b = PositionalHeads(2, 4), PositionalHeads(2, 4)
    a.attention, b.attention = "encoder", "cross"
    with pytest.raises(ConfigError, match="different attention types"):
        a.load_state_dict(b.state_dict())


@pytest.mark.parametrize("command", ["heads", "spectrum"])
def test_cli_tables_have_an_attention_column(command, tiny_bart, tmp_path):
    out = tmp_path / command
    result = invoke_cli(command, str(tiny_bart), "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    tables = sorted((out / "tables").glob("*.csv"))
    assert len(tables) >= 5
    for path in tables:
        table = pd.read_csv(path)
        assert table.columns[0] == "attention", path.name
        if len(table):  # (role_evidence is empty: a random model has no roles)
            assert list(dict.fromkeys(table["attention"])) == list(ATTENTION_TYPES), path.name
    figures = out / "figures"
    for attention in ATTENTION_TYPES:  # every figure once per type, prefixed with the type
        assert list(figures.glob(f"{attention}_*.svg")), attention
    assert not [p for p in figures.iterdir() if not p.name.startswith(ATTENTION_TYPES)]
    run = json.loads((out / "run.json").read_text())
    section = run["sections"][0]
    assert section["figures"] and all(f.startswith(ATTENTION_TYPES) for f in section["figures"])
    captions = {f["name"]: f["caption"] for f in section["doc"]["figures"]}
    assert all(name.startswith(ATTENTION_TYPES) for name in captions)
    captioned = [f for f in section["figures"] if f in captions]  # the section doc's figures
    assert captioned and all(captions[f].startswith(("encoder", "decoder", "cross"))
                             for f in captioned)
    if command == "heads":
        stats = pd.read_csv(out / "tables" / "head_stats.csv")
        # 2 encoder layers, 3 decoder layers (self and cross), 4 heads, 9 measures plus the
        # language-model heads' sink (first-token attention, every attention type); the
        # causal decoder self-attention has 7: no to_cls, to_sep, to_next (0 by
        # construction under its mask), and sink
        assert stats.groupby("attention").size().to_dict() == {
            "cross": 3 * 4 * 10, "decoder": 3 * 4 * 7, "encoder": 2 * 4 * 10}
        decoder = stats[stats["attention"] == "decoder"]
        assert "sink" in set(decoder["measure"]) and "to_next" not in set(decoder["measure"])
        assert "[cross-attention" in result.output


def test_analyze_runs_each_section_on_its_attention_types(tiny_bart, tmp_path):
    from attnlens.report.encoder_decoder import SECTION_ATTENTION

    out = tmp_path / "report"
    result = invoke_cli("analyze", str(tiny_bart), "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    for section in run["sections"]:
        expected = SECTION_ATTENTION.get(section["name"], ATTENTION_TYPES)
        found = {f.split("_", 1)[0] for f in section["figures"]}
        assert found == set(expected), section["name"]
        for name in section["tables"]:
            table = pd.read_csv(out / "tables" / f"{name}.csv")
            assert set(table["attention"]) <= set(expected), (section["name"], name)
    collapse = next(s for s in run["sections"] if s["name"] == "collapse")
    assert not collapse["tables"] and "not computed" in collapse["notes"][0]
