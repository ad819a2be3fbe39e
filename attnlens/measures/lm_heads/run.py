"""One run of the language-model heads measure: corpus analyzers, probes, tests, checks.

``LmHeads`` gives the corpus pass its analyzers (sinks, top keys, the streaming error on
the corpus, a bounded sample of sentences for the causal checks) and, once the pass is
over, ``compute(model)`` runs everything that needs its own inputs: the probes, the
haystacks, the long probes of the streaming view, the copying scores, the role tests and the
ablations. The result (``LmHeadsResult``) is computed once and shared by the head-roles
section (which adds the roles and the ``sink`` rows to its tables) and the measure's own
section.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.lm_heads.ablation import (
    ABLATION_COLUMNS,
    CausalMetric,
    ablation_rows,
    corpus_perplexity,
    head_means,
)
from attnlens.measures.lm_heads.copying import copying_form, copying_table, copying_unavailable
from attnlens.measures.lm_heads.probes import (
    ProbeScores,
    ProbeSet,
    frame_tokens,
    ordinary_token_ids,
    probes_from_file,
    random_probes,
    repeat_loss,
)
from attnlens.measures.lm_heads.retrieval import NEEDLE, RetrievalScores, haystacks
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.measures.lm_heads.sinks import SinkKeys, SinkScores, sink_key_table
from attnlens.measures.lm_heads.streaming import (
    StreamingError,
    kv_cache_savings,
    streaming_table,
)
from attnlens.measures.lm_heads.tables import (
    lm_role_tests,
    original_numbers,
    probe_scores,
    role_heads,
    sink_rate,
    sink_rows,
)
from attnlens.model.head_ids import head_ids_of
from attnlens.model.transformer import HookedTransformer
from attnlens.runs.stopwatch import LM_PROBES, LONG_PROBES, outside, phase
from attnlens.stats.bootstrap import Inference
from attnlens.stream.base import Analyzer, Batch
from attnlens.stream.runner import run_analyzers

SAMPLE_SENTENCES = 64  # corpus sentences kept for the perplexity check and mean ablation
ABLATION_PROBES = 64  # probes (of --probe-sequences) the second-repeat loss is measured on
# Haystacks and long probes per --probe-sequences (at least 1 each): 200 probes of 49 tokens
# come with 25 haystacks of ~211 tokens and 10 long probes of ~265 tokens (~18k tokens in all)
HAYSTACKS_PER_PROBE = 1 / 8
LONG_PER_PROBE = 1 / 20
# Long probes per forward: at most LONG_BATCH, and a layer's pattern [batch, head, n, n] within
# LONG_PATTERN_ELEMENTS (16 MiB of float32): 8 probes of 265 tokens on 12 heads held 27 MiB a
# pattern, and the analysis' peak memory was reached there (docs/performance.md, memory)
LONG_BATCH = 8
LONG_PATTERN_ELEMENTS = 1 << 22


def long_batch_size(model: HookedTransformer, width: int) -> int:
    """Long probes of ``width`` tokens per forward (``LONG_BATCH``, ``LONG_PATTERN_ELEMENTS``)."""
    per_probe = max(model.heads_per_layer) * width * width  # one probe's pattern entries
    return max(1, min(LONG_BATCH, LONG_PATTERN_ELEMENTS // per_probe))


def max_tokens(model: HookedTransformer) -> int:
    """The longest input the model takes: its positions (RoBERTa numbers them from
    ``pad_token_id + 1``), or its sliding window if shorter."""
    cfg = model.cfg
    limit = cfg.n_ctx - cfg.position_offset - int(cfg.positions_skip_padding)
    return min(limit, cfg.sliding_window) if cfg.sliding_window else limit


class CorpusSample(Analyzer):
    """The first ``max_sentences`` sentences' tokens (a bounded, mergeable corpus sample).

    ``max_sentences`` and ``sentences`` make it prefix-bound under torchrun
    (``attnlens.distributed``): rank 0 alone keeps the corpus's first sentences, as one
    process does.
    """

    name = "lm_corpus_sample"
    state_fields = ("ids", "masks")

    def __init__(self, max_sentences: int = SAMPLE_SENTENCES) -> None:
        self.max_sentences = max_sentences
        self.ids: list[torch.Tensor] = []  # one [pos] tensor per sentence, padding removed
        self.masks: list[torch.Tensor] = []

    @classmethod
    def for_model(cls, model: HookedTransformer,
                  max_sentences: int = SAMPLE_SENTENCES) -> CorpusSample:
        sample = cls(max_sentences)
        sample.identify_model(model)
        return sample

    @property
    def sentences(self) -> int:
        return len(self.ids)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return []

    def settings(self) -> dict:
        return {"max_sentences": self.max_sentences}

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        for row in range(batch.size):
            if len(self.ids) >= self.max_sentences:
                return
            n = int(batch.attention_mask[row].sum())
            self.ids.append(batch.input_ids[row, :n].cpu())
            self.masks.append(batch.attention_mask[row, :n].cpu())

    def batches(self, pad_id: int, batch_size: int = 16) -> list[Batch]:
        """The kept sentences (at most ``max_sentences``) as right-padded batches."""
        kept = list(zip(self.ids, self.masks, strict=True))[: self.max_sentences]
        out = []
        for start in range(0, len(kept), batch_size):
            chunk = kept[start : start + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, (i, m) in enumerate(chunk):
                ids[row, : len(i)], mask[row, : len(m)] = i, m
            out.append(Batch(input_ids=ids, attention_mask=mask))
        return out

    def result(self) -> dict[str, pd.DataFrame]:
        kept = self.ids[: self.max_sentences]  # a merge may hold more: the first ones count
        return {"lm_corpus_sample": pd.DataFrame({"tokens": [len(i) for i in kept]})}


@dataclass
class LmHeadsResult:
    """Everything the measure computed (tables by name, plus what the text reports)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    role_tests: pd.DataFrame = field(default_factory=pd.DataFrame)
    sink_rows: pd.DataFrame | None = None
    sink_rate: float = math.nan
    facts: dict[str, Any] = field(default_factory=dict)  # what the notes quote


class LmHeads:
    """The measure for one model (see the module docstring)."""

    def __init__(self, settings: LmHeadsSettings | None = None,
                 inference: Inference | None = None, min_examples: int = 100,
                 sts_pairs=None) -> None:
        self.settings = settings or LmHeadsSettings()
        self.inference = inference or Inference()
        self.min_examples = min_examples
        self.sts_pairs = sts_pairs  # SentencePairs for a sentence encoder's checks
        self.tokenizer = None
        self.model: HookedTransformer | None = None  # the model of the corpus analyzers
        self.corpus: dict[str, Analyzer] = {}
        self._result: LmHeadsResult | None = None
        # Where ``synthetic_runs`` come from when another process ran them (``run_beside``),
        # and whether the long probes were left to this process (``use_synthetic_runs``)
        self._synthetic_source: Callable[[], tuple] | None = None
        self._long_here: bool | Callable[[], bool] = False

    @property
    def ready(self) -> bool:
        """Whether ``corpus_analyzers`` ran (the measure applies to the model)."""
        return self.tokenizer is not None

    def made_for(self, model: HookedTransformer) -> bool:
        """Whether the corpus analyzers are ``model``'s (not, e.g., a report's null model,
        whose pass runs other sections' copies on a random copy of the model)."""
        return self.ready and model is self.model

    def corpus_analyzers(self, model: HookedTransformer, tokenizer) -> list[Analyzer]:
        """The analyzers of the one corpus pass (kept: ``compute`` reads them)."""
        s = self.settings
        self.tokenizer, self.model, self._result = tokenizer, model, None
        self._synthetic_source = None
        self.corpus = {
            "sinks": SinkScores.for_model(model, self.inference),
            "keys": SinkKeys.for_model(model),
            "streaming": StreamingError.for_model(model, s.sink_tokens, s.window),
            "sample": CorpusSample.for_model(model),
        }
        return list(self.corpus.values())

    # Inputs of the probes -------------------------------------------------------------
    def _frame(self, model: HookedTransformer) -> dict:
        tok = self.tokenizer
        first, closing = frame_tokens(tok)
        return {"vocab": ordinary_token_ids(tok, model.cfg.vocab_size), "first": first,
                "closing": closing, "pad": tok.pad_token_id, "special": tok.special_ids}

    def _fits(self, model: HookedTransformer, length: int, what: str) -> None:
        if length > max_tokens(model):
            raise ConfigError(f"{what} of {length} tokens exceed the {max_tokens(model)} "
                              "tokens the model takes; use a smaller --probe-length.")

    def probe_set(self, model: HookedTransformer, frame: dict) -> ProbeSet:
        s = self.settings
        if s.probe_ids is not None:
            probes = probes_from_file(s.probe_ids, frame["closing"], frame["pad"],
                                      frame["special"], model.cfg.vocab_size)
        else:
            probes = random_probes(frame["vocab"], s.probe_sequences, s.probe_length,
                                   s.probe_seed, frame["first"], frame["closing"],
                                   frame["pad"], frame["special"])
        self._fits(model, probes.input_ids.shape[1], "probes")
        return probes

    def long_probes(self, model: HookedTransformer, frame: dict) -> ProbeSet | None:
        """Probes whose repeat lies beyond the window: R = sink_tokens + 2 window, fewer
        when the model's positions are fewer (None when no repeat longer than 1 fits)."""
        s = self.settings
        room = (max_tokens(model) - len(frame["first"]) - len(frame["closing"])) // 2
        length = min(s.sink_tokens + 2 * s.window, room)
        if length < 2:
            return None
        n = max(1, int(s.probe_sequences * LONG_PER_PROBE))
        return random_probes(frame["vocab"], n, length, s.probe_seed + 1, frame["first"],
                             frame["closing"], frame["pad"], frame["special"])

    # The computation --------------------------------------------------------------------
    @torch.no_grad()
    def compute(self, model: HookedTransformer) -> LmHeadsResult:
        """Run everything past the corpus pass once; later calls return the same result."""
        if self._result is not None:
            return self._result
        if not self.ready:
            raise ConfigError("the language-model heads measure needs its corpus analyzers "
                              "first (corpus_analyzers).")
        if not self.made_for(model):
            raise ConfigError("the language-model heads measure's corpus analyzers were made "
                              "for another model; call corpus_analyzers with this one.")
        with phase(LM_PROBES):  # run.json's fixed costs
            self._result = self._compute(model)
        return self._result

    def _compute(self, model: HookedTransformer) -> LmHeadsResult:
        s, facts = self.settings, {}
        probes = retrieval = long_errors = None
        probe_batches: list[Batch] = []
        if s.probes:
            if self._synthetic_source is not None:  # run beside the corpus pass
                source, self._synthetic_source = self._synthetic_source, None
                # The long probes left here first, while the other process may still run
                # the rest (their facts first, as _synthetic orders them)
                long_here = _asked(self._long_here)
                here = self._long_runs(model, facts) if long_here else None
                probes, retrieval, long_errors, probe_batches, found = source()
                if long_here:
                    long_errors = here
                facts.update(found)
            else:
                probes, retrieval, long_errors, probe_batches = self._synthetic(model, facts)
        sinks: SinkScores = self.corpus["sinks"]
        facts["copying_missing"] = copying_unavailable(model)
        copying = None if facts["copying_missing"] else copying_table(model)
        tables = {"probe_scores": probe_scores(
            probes, retrieval, copying,
            probe_detail=f"second repeat of {self._repeat_text(facts)}-token segments",
            retrieval_detail=f"needle of {NEEDLE} tokens in {facts.get('haystack_tokens')}"
                             "-token haystacks")}
        facts["copying_form"] = None if copying is None else copying_form(model)
        tests = lm_role_tests(probes, sinks, retrieval, self.min_examples)
        sources = {"corpus": self.corpus["streaming"]}
        if long_errors is not None:
            sources["probes"] = long_errors
        streaming = streaming_table(sources, [b.attn.n_kv_heads for b in model.blocks],
                                    s.streaming_threshold)
        tables["streaming_heads"] = streaming
        tables["kv_cache"] = kv_cache_savings(streaming, s.context)
        tables["sink_keys"] = sink_key_table(self.corpus["keys"], self._decode)
        tables["role_ablation"] = self._ablations(model, tests, probe_batches, facts)
        # Heads are positions in their layer up to here (masks, ablations); every table the
        # result gives names them by their original numbers (a pruned model's head_ids).
        head_ids = head_ids_of(model)
        sizes = [b.attn.n_heads // b.attn.n_kv_heads for b in model.blocks]
        tables = {name: original_numbers(t, head_ids, sizes) for name, t in tables.items()}
        return LmHeadsResult(tables, original_numbers(tests, head_ids, sizes),
                             original_numbers(sink_rows(sinks), head_ids, sizes),
                             sink_rate(sinks), facts)

    def synthetic_runs(self, model: HookedTransformer,
                       long: bool | Callable[[], bool] = True) -> tuple:
        """The runs on the measure's own sequences (probes, haystacks, long probes: most of
        ``compute``'s time), with what they were: ``(probe scores, retrieval scores, long-probe
        streaming errors or None, the probe batches, facts)``, every part picklable. They need
        the model and the corpus analyzers' tokenizer only, so a report may run them in
        another process beside the corpus pass and hand them back (``use_synthetic_runs``).
        ``long=False`` leaves the long probes out (None, no facts of theirs), for the process
        that takes the result to run them (``use_synthetic_runs(..., long_here=True)``); a
        callable ``long`` is asked once the rest has run (the long probes run when it says
        True: a claim the other process may have taken first)."""
        if not self.ready:
            raise ConfigError("the language-model heads measure needs its corpus analyzers "
                              "first (corpus_analyzers).")
        facts: dict = {}
        with torch.no_grad(), phase(LM_PROBES):
            return (*self._synthetic(model, facts, long), facts)

    def use_synthetic_runs(self, source: Callable[[], tuple],
                           long_here: bool | Callable[[], bool] = False) -> None:
        """``compute`` takes its synthetic runs from ``source()`` (what ``synthetic_runs``
        returns, computed elsewhere for the same model) instead of running them; with
        ``long_here`` (``source`` ran ``synthetic_runs(model, long=False)``) it runs the long
        probes itself, before taking the rest. A callable ``long_here`` is asked then, once:
        True, they run here (``source`` left them out); False, ``source`` ran them."""
        self._synthetic_source, self._long_here = source, long_here

    def _synthetic(self, model: HookedTransformer, facts: dict,
                   long: bool | Callable[[], bool] = True) -> tuple:
        """(probe scores, retrieval scores, long-probe streaming errors or None, the probe
        batches): the runs on sequences of the measure's own (the long probes only when
        ``long`` is or, asked after the rest, says True); what they were goes to ``facts``."""
        # The analyzers read patterns (and values): each forward stops after the last
        # layer's (stop_when_fed), whose output projection and MLP nobody reads.
        s, frame = self.settings, self._frame(model)
        probe_set = self.probe_set(model, frame)
        probe_batches = probe_set.batches()
        probes = ProbeScores.for_model(model, self.inference)
        run_analyzers(model, probe_batches, [probes], show_progress=False, stop_when_fed=True)
        stacks = haystacks(frame["vocab"], max(1, int(s.probe_sequences * HAYSTACKS_PER_PROBE)),
                           s.probe_seed + 2, frame["first"], frame["closing"], frame["pad"],
                           frame["special"], n_ctx=max_tokens(model))
        retrieval = RetrievalScores.for_model(model, self.inference)
        run_analyzers(model, stacks.batches(), [retrieval], show_progress=False,
                      stop_when_fed=True)
        with outside(LM_PROBES):  # a claim may wait for the other process's go
            long_here = _asked(long)
        long_errors = self._long_runs(model, facts, frame) if long_here else None
        facts.update(probes=len(probe_set), repeat=sorted(set(probe_set.repeat)),
                     haystacks=len(stacks), haystack_tokens=int(stacks.input_ids.shape[1]),
                     needle=NEEDLE)
        return probes, retrieval, long_errors, probe_batches

    @torch.no_grad()
    def _long_runs(self, model: HookedTransformer, facts: dict,
                   frame: dict | None = None) -> StreamingError | None:
        """The long probes' streaming errors (None when no long probe fits the model); their
        repeat and count go to ``facts``."""
        s = self.settings
        long = self.long_probes(model, self._frame(model) if frame is None else frame)
        if long is None:
            return None
        long_errors = StreamingError.for_model(model, s.sink_tokens, s.window)
        with phase(LONG_PROBES):
            run_analyzers(model, long.batches(long_batch_size(model, long.input_ids.shape[1])),
                          [long_errors], show_progress=False, stop_when_fed=True)
        facts.update(long_repeat=long.repeat[0], long_probes=len(long))
        return long_errors

    def _decode(self, token_id: int) -> str:
        return self.tokenizer.decode_tokens([token_id])[0]

    @staticmethod
    def _repeat_text(facts: dict) -> str:
        repeats = facts.get("repeat") or []
        return "/".join(str(r) for r in repeats[:3]) + ("/..." if len(repeats) > 3 else "")

    def causal_metrics(self, model: HookedTransformer,
                       probe_batches: list[Batch]) -> list[CausalMetric]:
        """The metrics of the causal checks this model and these inputs allow."""
        metrics = []
        sample = self.corpus["sample"].batches(self.tokenizer.pad_token_id)
        if model.cfg.head == "lm" and model.cfg.causal:
            if probe_batches:
                few = probe_batches[: -(-ABLATION_PROBES // probe_batches[0].size)]
                metrics.append(CausalMetric(
                    "second_repeat_loss", lambda mask: repeat_loss(model, few, mask)))
            if sample:
                metrics.append(CausalMetric(
                    "perplexity", lambda mask: corpus_perplexity(model, sample, mask)))
        elif model.cfg.head in (None, "pooler") and self.sts_pairs is not None:
            from attnlens.metrics.sts_task import StsMetric

            sts = StsMetric(self.sts_pairs, self.tokenizer)
            metrics.append(CausalMetric("sts_spearman", lambda mask: sts.evaluate(model, mask),
                                        higher_is_worse=False))
        return metrics

    def _ablations(self, model: HookedTransformer, tests: pd.DataFrame,
                   probe_batches: list[Batch], facts: dict) -> pd.DataFrame:
        s = self.settings
        metrics = self.causal_metrics(model, probe_batches)
        facts["metrics"] = [m.name for m in metrics]
        roles = {role: heads for role, heads in role_heads(tests).items() if heads}
        if not metrics or not roles:
            return pd.DataFrame(columns=ABLATION_COLUMNS)
        means = None
        if s.ablation == "mean":
            reference = self.corpus["sample"].batches(self.tokenizer.pad_token_id)
            means = head_means(model, reference or probe_batches)
        rows = ablation_rows(model, roles, metrics, s.controls, self.inference.seed,
                             s.ablation, means)
        return pd.DataFrame.from_records(rows, columns=ABLATION_COLUMNS)


def _asked(answer: bool | Callable[[], bool]) -> bool:
    """``answer``, or what it says when it is a question (a claim, asked once)."""
    return answer() if callable(answer) else answer
