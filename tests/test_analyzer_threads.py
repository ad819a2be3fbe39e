"""The analyzers' intra-op threads (``attnlens.stream.threads``, issue 29 rows31): the feeder
runs every call into an analyzer at the limited count, the forward keeps its own, the count
is restored after, and the states match those of an unlimited run."""

from __future__ import annotations

import pytest
import torch

from attnlens.data.corpus import load_corpus
from attnlens.errors import ConfigError
from attnlens.report.analyze import default_sections
from attnlens.stream.base import Analyzer
from attnlens.stream.runner import run_analyzers
from attnlens.stream.threads import (
    DEFAULT_ANALYZER_THREADS,
    ENV,
    analyzer_threads_setting,
    limited_threads,
)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_limited_threads_sets_restores_and_nests(two_threads):
    with limited_threads(1):
        assert torch.get_num_threads() == 1
        with limited_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with limited_threads(None):
        assert torch.get_num_threads() == 2
    with limited_threads(4):  # never more than the forward's
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), limited_threads(1):
        raise RuntimeError("restored on the way out")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(("text", "expected"), [("", DEFAULT_ANALYZER_THREADS),
                                                (" ", DEFAULT_ANALYZER_THREADS), ("0", None),
                                                ("1", 1), (" 2 ", 2)])
def test_setting_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv(ENV, text)
    assert analyzer_threads_setting() == expected


def test_setting_unset(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert analyzer_threads_setting() == DEFAULT_ANALYZER_THREADS


@pytest.mark.parametrize("text", ["one", "-1", "1.5"])
def test_bad_setting_is_a_config_error(monkeypatch, text):
    monkeypatch.setenv(ENV, text)
    with pytest.raises(ConfigError, match=ENV):
        analyzer_threads_setting()


class ThreadsSeen(Analyzer):
    """Records the intra-op threads of every feeding call."""

    name = "threads_seen"
    layerwise = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def hook_names(self, model) -> list[str]:
        return [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]

    def begin_batch(self, batch) -> None:
        self.seen.append(("begin_batch", torch.get_num_threads()))

    def update_layer(self, batch, layer, cache) -> None:
        self.seen.append(("update_layer", torch.get_num_threads()))

    def end_batch(self, batch) -> None:
        self.seen.append(("end_batch", torch.get_num_threads()))

    def result(self) -> dict:
        return {}


@pytest.fixture(scope="module")
def batches(minilm):
    _, tokenizer = minilm
    corpus = load_corpus(text=None, treebank=None)
    return corpus.batches(tokenizer, batch_size=8, max_length=64)[:2]


@pytest.mark.parametrize(("limit", "env", "expected"), [(1, None, 1), (0, None, 2),
                                                         (None, "1", 1), (None, "0", 2),
                                                         (0, "1", 2)])
def test_feeder_runs_analyzers_at_the_limit_and_the_forward_at_its_own(
        minilm, batches, two_threads, monkeypatch, limit, env, expected):
    model, _ = minilm
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    forward_threads = []

    def in_forward(x, hook):
        forward_threads.append(torch.get_num_threads())

    analyzer = ThreadsSeen()
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", in_forward)]):
        run_analyzers(model, batches, [analyzer], show_progress=False,
                      analyzer_threads=limit)
    assert forward_threads == [2, 2]  # the forward keeps every thread
    n_layers = model.cfg.n_layers
    assert [kind for kind, _ in analyzer.seen] == (
        ["begin_batch"] + ["update_layer"] * n_layers + ["end_batch"]) * 2
    assert {threads for _, threads in analyzer.seen} == {expected}
    assert torch.get_num_threads() == 2  # restored


def largest_difference(a, b) -> float:
    """The largest absolute difference between two analyzer states (inf: they differ in
    structure, integers or labels)."""
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if not a.is_floating_point():
            return 0.0 if torch.equal(a, b) else float("inf")
        same = (a == b) | (a.isnan() & b.isnan())
        return float((a.double() - b.double()).abs()[~same].max()) if (~same).any() else 0.0
    if isinstance(a, dict):
        if set(a) != set(b):
            return float("inf")
        return max((largest_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return float("inf")
        return max((largest_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float) and isinstance(b, float):
        return 0.0 if a == b or (a != a and b != b) else abs(a - b)
    return 0.0 if a == b else float("inf")


@pytest.mark.parametrize("section", range(len(default_sections())))
def test_states_at_one_thread_match_the_forwards_threads(minilm, batches, two_threads,
                                                         section):
    """Every analyzer of ``analyze`` fed at one thread and at two: the same states. The
    thread count changes only how a parallel reduction splits its sum; the analyzers'
    reductions run along rows far shorter than ATen's grain, so they match exactly."""
    model, tokenizer = minilm
    states = []
    for threads in (1, 0):
        analyzers = default_sections()[section].analyzers(model, tokenizer)
        run_analyzers(model, batches, analyzers, show_progress=False,
                      analyzer_threads=threads)
        states.append([a.state_dict()["state"] for a in analyzers])
    assert largest_difference(*states) == 0.0


def test_encoder_decoder_feeders_run_at_the_limit(tmp_path, two_threads, monkeypatch):
    """``run_analyzers`` on an encoder-decoder model (one feeder per attention type,
    ``stream.attention_types``) applies the limit too."""
    from attnlens.data.text import sample_sentences, text_batches
    from attnlens.loaders import load
    from attnlens.model.encoder_decoder import ATTENTION_TYPES
    from attnlens.stream.attention_view import AttentionView
    from tests.seq2seq_utils import tiny_bart_with_tokenizer

    monkeypatch.delenv(ENV, raising=False)
    tiny_bart_with_tokenizer(tmp_path, sorted({w for s in sample_sentences()[:4]
                                               for w in s.split()}))
    model, tokenizer = load(tmp_path)
    batches = text_batches(tokenizer, sample_sentences()[:4], batch_size=2)
    analyzers = []
    for attention in ATTENTION_TYPES:
        analyzer = ThreadsSeen()
        analyzer.attention = attention
        view = AttentionView(model, attention)
        analyzer.hook_names = lambda _model, view=view: [
            f"blocks.{i}.attn.hook_pattern" for i in range(view.cfg.n_layers)]
        analyzers.append(analyzer)
    run_analyzers(model, batches, analyzers, show_progress=False, analyzer_threads=1)
    for analyzer in analyzers:
        assert analyzer.seen and {threads for _, threads in analyzer.seen} == {1}
    assert torch.get_num_threads() == 2
