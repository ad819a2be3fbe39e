"""Runs split across processes: sharding, merging analyzer states, torchrun end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.distributed import DistContext, prefix_bound, shard
from attnlens.errors import ConfigError
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer

TORCHRUN = Path(sys.executable).with_name("torchrun")


# --- sharding (no processes) -----------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shards_are_contiguous_and_concatenate_to_the_whole(world):
    items = [list(range(w)) for w in (5, 1, 7, 3, 3, 9, 2, 4, 6, 1)]  # weights = lengths
    shares = [shard(items, DistContext(rank, world)) for rank in range(world)]
    assert [x for share in shares for x in share] == items  # order kept, nothing lost
    weights = [sum(len(x) for x in share) for share in shares]
    assert max(weights) - min(weights) <= max(len(x) for x in items)  # balanced by weight


def test_prefix_bound_reads_the_mark_or_the_sentence_budget():
    class Bounded:
        max_sentences, sentences = 32, 0

    class Marked:
        distributed = "rank0"

    assert prefix_bound(Bounded()) and prefix_bound(Marked())
    assert not prefix_bound(SpectrumAnalyzer([2]))


# --- torchrun end to end ----------------------------------------------------------------------
CORPUS = "\n".join([
    "The cat sat on the mat.", "A quick brown fox jumps over the lazy dog.", "It rained.",
    "She reads long books in the evening.", "We went home early because it was late.",
    "Dogs bark.", "The committee approved the new budget on Tuesday.", "Why not?",
    "Birds fly south in winter.", "He said that the train was late again.",
]) + "\n"


def run_analyze(args: list[str], out: Path, processes: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNLENS_FIGURE_WORKERS": "0"}
    prefix = ([str(TORCHRUN), "--nproc-per-node", str(processes), "--master-port",
               str(29500 + os.getpid() % 1000)] if processes > 1 else [sys.executable])
    command = [*prefix, "-m", "attnlens.cli", "analyze", *args, "--out", str(out), "-q"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, atol: float, name: str) -> None:
    """Text and integer columns identical, float columns within ``atol``."""
    assert list(a.columns) == list(b.columns) and a.shape == b.shape, name
    for column in a.columns:
        left, right = a[column], b[column]
        if pd.api.types.is_float_dtype(left):
            np.testing.assert_allclose(left, right, rtol=0, atol=atol, equal_nan=True,
                                       err_msg=f"{name}:{column}")
        else:  # counts, labels, argmax results: identical
            assert left.reset_index(drop=True).equals(right.reset_index(drop=True)), (
                f"{name}:{column}")


def compare_tables(one: Path, many: Path, atol: float) -> int:
    """Every CSV of two report folders' ``tables/`` equal (``compare_frames``)."""
    one, many = one / "tables", many / "tables"
    names = sorted(p.name for p in one.glob("*.csv"))
    assert names == sorted(p.name for p in many.glob("*.csv"))
    for name in names:
        compare_frames(pd.read_csv(one / name), pd.read_csv(many / name), atol, name)
    return len(names)


# --- per-sentence state: shards merged as rank 0 merges them ---------------------------------
@pytest.mark.parametrize("world", [2, 3])
def test_sharded_head_roles_merge_to_the_single_process_tables(minilm, world):
    """Head-role analyzers keep per-sentence rows keyed by corpus index; shards merged in
    rank order must give the same sentences, bootstrap intervals, tests and held-out split."""
    from attnlens.data.conllu import read_conllu
    from attnlens.data.words import treebank_batches
    from attnlens.distributed import batch_tokens, merge_states, shipped_states
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.stream.runner import run_analyzers
    from tests.conftest import shared_file

    model, tokenizer = minilm
    sentences = read_conllu(shared_file("ud-ewt/en_ewt-ud-dev.conllu"))[:96]
    batches = treebank_batches(tokenizer, sentences, batch_size=8, max_length=128)
    section = HeadRolesSection(min_examples=10, clusters=True)
    whole = run_analyzers(model, batches, section.analyzers(model, tokenizer),
                          show_progress=False)
    ranks = []
    for rank in range(world):
        analyzers = section.analyzers(model, tokenizer)
        ranks.append(run_analyzers(model, shard(batches, DistContext(rank, world), batch_tokens),
                                   analyzers, show_progress=False))
    merged = ranks[0]
    merge_states(merged, [shipped_states(a) for a in ranks[1:]])
    per_sentence = 0
    for single, combined in zip(whole, merged, strict=True):
        if isinstance(getattr(single, "sentences", None), list):  # corpus indices, in order
            assert combined.sentences == single.sentences, type(single).__name__
            assert len(set(single.sentences)) == len(sentences)
            per_sentence += 1
    assert per_sentence >= 4  # positional, syntactic, rare-word, behaviour (and more)
    expected, got = section.tables(model, whole), section.tables(model, merged)
    assert sorted(got) == sorted(expected)
    assert "syntactic_heldout" in got and "head_distances" in got
    for name in expected:
        # float64 running sums added in another order: a few ulps of values of order 1-100
        compare_frames(expected[name], got[name], atol=1e-9, name=name)


def test_every_corpus_analyzer_of_analyze_merges_to_the_single_process_tables(minilm):
    """Each analyzer of `analyze`'s corpus pass, fed two shards and merged as rank 0 merges
    them (a shallow copy of its own analyzer loads the other rank's state), gives the tables
    of one analyzer fed every batch. Before the fix, sink keys' counts lived in an object
    the shallow copy shared, so loading rank 1's state overwrote rank 0's (2026-11-28)."""
    from attnlens.data.corpus import load_corpus
    from attnlens.distributed import batch_tokens, merge_states, shipped_states
    from attnlens.report.analyze import default_sections
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = minilm
    batches = load_corpus().batches(tokenizer, 8, 128)

    def analyzers() -> list:
        return [a for section in default_sections() for a in section.analyzers(model, tokenizer)
                if not prefix_bound(a) and not getattr(a, "needs_model_pass", False)]

    whole = run_analyzers(model, batches, analyzers(), show_progress=False)
    ranks = [run_analyzers(model, shard(batches, DistContext(rank, 2), batch_tokens),
                           analyzers(), show_progress=False) for rank in range(2)]
    merge_states(ranks[0], [shipped_states(ranks[1])])
    names = {type(a).__name__ for a in whole}
    assert "SinkKeys" in names and len(names) >= 10, names
    for single, combined in zip(whole, ranks[0], strict=True):
        expected, got = single.result(), combined.result()
        assert sorted(got) == sorted(expected), type(single).__name__
        for name in expected:  # float64 running sums added in another order: a few ulps
            compare_frames(expected[name], got[name], atol=1e-9,
                           name=f"{type(single).__name__}.{name}")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, minilm) -> Path:
    """A tiny random BERT with MiniLM's tokenizer files, saved as a checkpoint folder."""
    from transformers import BertConfig, BertModel

    model, _ = minilm
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    source = Path(model.cfg.source["path"])
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return folder


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed beside python")
def test_torchrun_two_processes_write_the_single_process_tables(tmp_path, tiny_checkpoint):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    args = [str(tiny_checkpoint), "--text", str(corpus), "--batch-size", "2"]
    run_analyze(args, tmp_path / "one", 1)
    run_analyze(args, tmp_path / "two", 2)
    # Float64 running sums merged in another order: a few ulps of values of order 1-100.
    assert compare_tables(tmp_path / "one", tmp_path / "two", atol=1e-9) > 10
    assert (tmp_path / "two" / "index.html").is_file()
    record = json.loads((tmp_path / "two" / "run.json").read_text(encoding="utf-8"))
    assert record["processes"] == 2 and record["sentences"] == len(CORPUS.splitlines())


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed beside python")
def test_two_runs_on_two_processes_write_byte_identical_tables(tmp_path, tiny_checkpoint):
    """Determinism on two processes (issue 15): the shards are fixed by the corpus and rank 0
    merges the states in rank order, so a rerun writes the same bytes, not just close floats."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    args = [str(tiny_checkpoint), "--text", str(corpus), "--batch-size", "2"]
    run_analyze(args, tmp_path / "a", 2)
    run_analyze(args, tmp_path / "b", 2)
    names = sorted(p.name for p in (tmp_path / "a" / "tables").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b" / "tables").iterdir())
    assert len([n for n in names if n.endswith(".csv")]) > 10
    for name in names:
        a, b = tmp_path / "a" / "tables" / name, tmp_path / "b" / "tables" / name
        assert a.read_bytes() == b.read_bytes(), name


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed beside python")
def test_torchrun_on_minilm_and_the_sample_treebank(tmp_path):
    run_analyze(["--batch-size", "8"], tmp_path / "one", 1)
    run_analyze(["--batch-size", "8"], tmp_path / "two", 2)
    # Both runs inherit one environment (kernel set, OMP_NUM_THREADS=1) and forward the same
    # whole batches (shard splits between batches), so every fp32 value per batch is bitwise
    # the same; what differs is how rank 0 regroups the float64 running sums (per-sentence
    # rows merge in corpus order, unchanged). Regrouping k <= 43 sentences' terms of magnitude
    # <= 630 (the largest value in these tables: linear_attention) moves a result by at most
    # about k * eps64 * 630 = 43 * 2.2e-16 * 630 = 6.0e-12 (measured 2.7e-15): 1e-9 leaves
    # 170x headroom and is still far below the fp32 rounding (6e-8 relative) that a batching
    # or kernel difference would show. rtol is 0 (compare_frames).
    assert compare_tables(tmp_path / "one", tmp_path / "two", atol=1e-9) > 10


def test_an_analyzer_without_state_fields_is_refused_before_any_work():
    from attnlens.distributed import run_sharded

    class Legacy:
        state_fields = ()

    with pytest.raises(ConfigError, match="state_fields"):
        run_sharded(None, [], [Legacy()], DistContext(0, 2))


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed beside python")
@pytest.mark.parametrize("rescore", [False, True])
def test_torchrun_prune_spreads_evaluations_and_matches_one_process(tmp_path, rescore):
    from transformers import BertConfig, BertModel

    from tests.parity_utils import TINY, save_tiny
    from tests.pruning_toys import vocab_size, word_tokenizer, write_pairs

    checkpoint = tmp_path / "tiny"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), checkpoint)
    word_tokenizer().hf.save_pretrained(str(checkpoint))
    pairs = write_pairs(tmp_path / "pairs.csv", 32)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNLENS_FIGURE_WORKERS": "0"}
    common = ["-m", "attnlens.cli", "prune", str(checkpoint), "--metric", "sts", "--pairs",
              str(pairs), "--order", "importance,random,confidence", "--seeds", "2", "--step",
              "0.25", "--max-fraction", "0.75", "--batch-size", "8", "--quiet",
              *(["--rescore"] if rescore else [])]
    tables = {}
    for processes in (1, 2):
        out = tmp_path / f"run{processes}"
        prefix = ([str(TORCHRUN), "--nproc-per-node", "2", "--master-port",
                   str(29600 + os.getpid() % 1000)] if processes > 1 else [sys.executable])
        done = subprocess.run([*prefix, *common, "--out", str(out)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        tables[processes] = (pd.read_csv(out / "prune_curve.csv", keep_default_na=False),
                             pd.read_csv(out / "prune_scores.csv"))
    (curve1, scores1), (curve2, scores2) = tables[1], tables[2]
    timing = ["seconds"]
    # Same masks and the same metric computed on the same CPU kernels: identical values.
    pd.testing.assert_frame_equal(curve1.drop(columns=timing), curve2.drop(columns=timing))
    pd.testing.assert_frame_equal(scores1, scores2)
