"""Issue 29's figures in one process: the corpus pass against the forward it needs, the floor.

Printed, all over the same sentences in the same batches (the command's own: length-sorted
batches of at most ``--batch-size`` sentences and ``--batch-tokens`` padded tokens, by
default `analyze`'s; ``--batch-tokens 0``: ``--batch-size`` sentences a batch; the model's
trained ``--max-length``):

- **bare forward**: Hugging Face's eager forward with ``output_attentions=True`` (the forward
  the analysis cannot avoid: it forms every attention pattern), ``AutoModel``, no hooks;
- **corpus pass**: attnlens' forward with every analyzer of `attnlens analyze` fed by the
  runner (``stream.runner.run_analyzers``, as ``report.analyze.analyze`` calls it: each
  forward stops once the analyzers have all they read, ``stop_when_fed``), and the ratio
  corpus pass / bare forward (target <= 1.3);
- **null model pass** (``--null random-init``: the same analyzers on a randomly initialised
  copy over up to 512 sentences) and the **language-model heads' own passes** (probes,
  haystacks, ablations: run while the section writes its tables), separately, and the ratio
  with them included;
- **per-analyzer table**: the seconds each analyzer spends in its feeding methods during the
  pass (a shared per-block quantity is charged to the first analyzer that asks for it);
- **floor**: the analyzers' essential arithmetic alone, a tight vectorised loop over the
  patterns cached beforehand (``floor_seconds``), and its ratio to the bare forward;
- **dispatch floor**: the aten operations the analyzers dispatch over the pass (a
  ``TorchDispatchMode`` counter around their feeding methods; views apart), times this
  device's cheapest operation (an in-place add to a one-element tensor, on a GPU a kernel
  launch; a view), measured in the same process: what the analyzers cost at the least as
  written, whatever their arithmetic; with the arithmetic floor, the pass's floor
  (``--dispatch-floor`` also with ``--pass-only`` or on a GPU);
- **fixed costs**: the whole `attnlens analyze` command on the same corpus in a fresh process
  (``--skip-command`` leaves it out), from its start to its exit, minus the passes above as
  its ``run.json`` records them (target <= 4 s).

    python benchmarks/corpus_pass.py [--threads 2] [--max-sentences N] [--treebank PATH]
        [--skip-command] [--profile [--profile-out FILE]] [--cpu] [--rounds N] [--pass-only]
        [--dispatch-floor]
        [--device cuda] [--dtype bfloat16]
        [--batch-size N] [--batch-tokens N] [--before-batch-size N]

``--before-batch-size N`` also times the pass in batches of N sentences (no token budget)
in the same process, the two batchings alternating round by round (``--rounds``), and
prints the pass's and the bare forward's seconds under each (the token budget's gain).

Default corpus: UD EWT dev (``../shared/data``), else the embedded sample treebank.
``--max-sentences N`` keeps the first N sentences (a quick iteration, not the target's
setting). ``--spectrum-sentences N`` sets `analyze`'s option of that name (the spectrum's
exact singular values over N sentences evenly spaced by corpus index; 0: every one) for the
pass, the floor and the command alike; by default its default (256).
``--analyzer-threads N`` runs the analyzers at N intra-op threads (the forward keeps
``--threads``; ``stream.threads``), in the pass and in the command.
``--device cuda`` runs both forwards and the analyzers on a GPU (every time taken after
``torch.cuda.synchronize``; the floor is left out there, it is CPU arithmetic; the command
runs with ``--device cuda`` too). ``--dtype bfloat16`` loads both models in bfloat16
(`analyze`'s ``--dtype``; the command too). ``--profile`` prints cProfile's top functions
of the corpus pass (``--profile-out FILE``: also its stats, for ``pstats``'
``print_callers``). ``--cpu`` times with the process's CPU time instead of wall time (less
sensitive to other work on a shared machine; the command's fixed costs stay wall time; the
children beside the pass are not this process).

Idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``, set before torch loads, as the
`attnlens` program sets it: ``attnlens/runs/openmp.py``; a policy in the environment is
kept), so the pass is timed as the command runs it, beside its forked children.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from attnlens.runs import openmp

openmp.passive_waits()  # before torch loads: idle OpenMP threads sleep, as in the command

import torch  # noqa: E402
from bench_record import record, this_command  # noqa: E402

SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"
CLOCK = time.perf_counter  # --cpu: time.process_time (every thread of this process)
DEVICE = torch.device("cpu")  # --device
DTYPE = torch.float32  # --dtype (both forwards)
SPECTRUM_SENTENCES: list[int | None] = [None]  # --spectrum-sentences (None: analyze's default)
PROFILE_OUT: list[Path | None] = [None]  # --profile-out
BESIDE: dict[str, float] = {}  # the timed corpus pass's children: seconds per phase
FEEDING = ("begin_batch", "update_layer", "update_block", "end_layer", "end_batch", "update",
           "model_pass")


def load_batches(tokenizer, model, treebank: Path | None, max_sentences: int | None,
                 batch_size: int, batch_tokens: int | None = None):
    from attnlens.data.corpus import load_corpus
    from attnlens.loaders.trained_length import default_max_length

    corpus = load_corpus(treebank=str(treebank) if treebank else None,
                         max_sentences=max_sentences)
    max_length = default_max_length(model.cfg.source.get("path"))
    return corpus.batches(tokenizer, batch_size, max_length, batch_tokens or None), max_length


def now() -> float:
    """CLOCK, after the GPU's queued work has finished (``--device cuda``)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    return CLOCK()


def load_hf_eager(path: str):
    """The checkpoint in plain transformers, eager attention (it can return patterns)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(path, attn_implementation="eager",
                                     dtype=DTYPE).eval().to(DEVICE)


@torch.no_grad()
def bare_forward(hf, batch) -> None:
    """The bare HF eager forward with every attention pattern returned (inputs copied to the
    device as the runner copies them)."""
    hf(**batch.to(DEVICE).model_inputs(), output_attentions=True)


def timed_methods(analyzer, totals: dict[str, float], key: str):
    """Wrap ``analyzer``'s feeding methods so their time adds to ``totals[key]``."""
    totals.setdefault(key, 0.0)

    def wrap(method):
        def run(*args, **kwargs):
            began = now()
            try:
                return method(*args, **kwargs)
            finally:
                totals[key] += now() - began
        return run

    for name in FEEDING:
        if hasattr(analyzer, name) and name not in vars(analyzer):
            setattr(analyzer, name, wrap(getattr(analyzer, name)))


def corpus_pass(model, tokenizer, batches, hf, per_analyzer: bool, profile: bool):
    """(bare seconds, pass seconds, sections, analyzers by section, {analyzer: seconds}).

    The bare forward and the pass alternate batch by batch (``run_analyzers`` over one batch
    at a time: the analyzers' states add up as over the whole list), so both see the same
    load of a shared machine; their order alternates too. As in `analyze`, the analyzers
    that run beside the pass (``report.own_passes_beside``: the collapse variants, where
    side workers are allowed) run in forked children started with the pass; they are
    stopped (SIGSTOP) while the bare forward runs, so that they load the pass alone, and
    the pass includes the wait for their states at its end."""
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.report.analyze import default_sections
    from attnlens.report.own_passes_beside import OwnPassesBeside
    from attnlens.report.side_work import side_workers_allowed
    from attnlens.stream.runner import run_analyzers

    sections = default_sections(LmHeads())
    for section in sections:
        if section.name == "spectrum" and SPECTRUM_SENTENCES[0] is not None:
            section.max_sentences = SPECTRUM_SENTENCES[0] or None
    per_section = [s.analyzers(model, tokenizer) for s in sections]
    everything = [a for group in per_section for a in group]
    totals: dict[str, float] = {}
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    start = now()
    beside = OwnPassesBeside(everything, model, batches, side_workers_allowed(model))
    in_pass = beside.in_pass(everything)
    if per_analyzer:  # the pass's own analyzers (those beside it: their child's time, BESIDE)
        for section, group in zip(sections, per_section, strict=True):
            for analyzer in group:
                if analyzer in in_pass:
                    timed_methods(analyzer, totals,
                                  f"{section.name}: {type(analyzer).__name__}")
    bare, ours = 0.0, now() - start
    for i, batch in enumerate(batches):
        for turn in ((0, 1) if i % 2 == 0 else (1, 0)):
            start = now()
            if turn == 0:
                with _stopped(beside):
                    bare_forward(hf, batch)
                bare += now() - start
                continue
            if profiler is not None:
                profiler.enable()
            run_analyzers(model, [batch], in_pass, show_progress=False, stop_when_fed=True)
            ours += now() - start
            if profiler is not None:
                profiler.disable()
    start = now()
    beside.take(everything)
    ours += now() - start
    if per_analyzer:
        from attnlens.report.side_work import SIDE_PREFIX
        from attnlens.runs import stopwatch

        BESIDE.update({k.removeprefix(SIDE_PREFIX): v for k, v in stopwatch.take().items()
                       if k.startswith(SIDE_PREFIX)})
    if profiler is not None:
        import pstats

        stats = pstats.Stats(profiler)
        if PROFILE_OUT[0] is not None:
            stats.dump_stats(PROFILE_OUT[0])
        stats.sort_stats("tottime").print_stats(30)
    for analyzer in everything:  # unwrap
        for name in FEEDING:
            vars(analyzer).pop(name, None)
    return bare, ours, sections, per_section, totals


@contextmanager
def _stopped(beside):
    """The children of ``beside`` (``OwnPassesBeside``) stopped inside the block."""
    running = [job.process.pid for _, job in beside.jobs if job.process.is_alive()]
    for pid in running:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in running:
            os.kill(pid, signal.SIGCONT)


def null_pass_seconds(model, tokenizer, batches, sections) -> float:
    from attnlens.distributed import SINGLE
    from attnlens.report.null_run import NullOptions, run_null

    start = now()
    run_null(model, tokenizer, batches, sections, NullOptions(), SINGLE)
    return now() - start


def lm_heads_seconds(model, sections, per_section) -> float:
    """The language-model heads section's write: its probes, haystacks and ablations."""
    from attnlens.runs.io import no_figures

    for section, group in zip(sections, per_section, strict=True):
        if section.name == "lm_heads":
            with tempfile.TemporaryDirectory() as tmp, no_figures():
                start = now()
                section.write(model, group, Path(tmp), ("png",))
                return now() - start
    return 0.0


# The floor -------------------------------------------------------------------------------
@torch.no_grad()
def cache_patterns(model, batches) -> list[list[torch.Tensor]]:
    """Every batch's patterns, ``[layer] -> [batch, head, query_pos, key_pos]``."""
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
    cached: list[list[torch.Tensor]] = []

    def keep(x: torch.Tensor, hook) -> None:
        cached[-1].append(x.detach())

    with model.hooks([(n, keep) for n in names]):
        for batch in batches:
            cached.append([])
            model(**batch.model_inputs(), return_type="hidden")
    return cached


@torch.no_grad()
def floor_seconds(cached, batches, hf, spectrum_sentences: int | None = None
                  ) -> tuple[float, dict[str, float]]:
    """The analyzers' essential arithmetic on cached patterns, timed per kind of work.

    Per layer and batch, on ``p [batch, head, query, key]`` in float32: row maxima and
    argmax, ties, entropies (head statistics, positional, rare words, sinks), attention
    received per key and to the first token, the offset histogram (positional heads, sparse
    coverage), word pooling ``W p W^T`` (syntactic heads), ``p - p^T`` norms (asymmetry), the
    row-normalised ``p p^T`` products of rollout; then the spectrum's eigenvalues of every
    head's Gram matrix ``p p^T`` (``eigvalsh`` over the batch's heads, the LAPACK floor) for
    the sentences the spectrum reads: ``spectrum_sentences`` evenly spaced by corpus index
    (`analyze`'s ``--spectrum-sentences``, ``spread_sample``; None: every sentence).
    A bare forward runs before each batch's arithmetic (timed apart: the ratio's baseline
    under the same load). Returns (bare seconds, seconds per kind of work).
    """
    from attnlens.measures.spectrum.spectrum import spread_sample

    bare = 0.0
    parts = {"per-row and per-key reductions": 0.0, "offset histogram": 0.0,
             "word pooling": 0.0, "asymmetry and rollout": 0.0, "spectrum eigenvalues": 0.0}
    for layers, batch in zip(cached, batches, strict=True):
        start = CLOCK()
        bare_forward(hf, batch)
        bare += CLOCK() - start
        mask = batch.attention_mask.to(torch.float32)  # [batch, key_pos]
        length = mask.shape[-1]
        offsets = (torch.arange(length)[None, :] - torch.arange(length)[:, None]
                   + length - 1).flatten()  # [query*key] offset bins
        pool = mask[:, None, :] * torch.eye(length)  # [batch, word, token]
        index = torch.tensor(batch.extra["index"])
        spectrum_rows = (spread_sample(index, spectrum_sentences, batch.extra.get("corpus_size"))
                         if spectrum_sentences is not None
                         else torch.ones_like(index, dtype=torch.bool))  # [batch]
        previous = None
        for p in layers:
            t0 = CLOCK()
            p = p.float()
            top, where = p.max(-1)
            ties = (p == top[..., None]).sum(-1)
            ent = torch.special.entr(p).sum(-1)
            received = p.sum(-2)
            stats = (top * mask[:, None]).sum((0, 2)), ent.sum((0, 2)), received.sum(0)
            del stats, ties, where
            t1 = CLOCK()
            hist = torch.zeros(p.shape[1], 2 * length - 1)
            hist.index_add_(1, offsets, p.sum(0).reshape(p.shape[1], -1).T.contiguous().T)
            t2 = CLOCK()
            words = pool[:, None] @ p @ pool[:, None].transpose(-1, -2)
            del words
            t3 = CLOCK()
            asym = (p - p.transpose(-1, -2)).square().sum((-1, -2))
            mean = p.mean(1)
            previous = mean if previous is None else mean @ previous
            del asym
            t4 = CLOCK()
            if spectrum_rows.any():
                sampled = p[spectrum_rows]
                torch.linalg.eigvalsh(sampled @ sampled.transpose(-1, -2))
            t5 = CLOCK()
            for key, spent in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
                                  strict=True):
                parts[key] += spent
    return bare, parts


# The dispatch floor -----------------------------------------------------------------------
def count_dispatches(model, tokenizer, batches) -> tuple[int, int, dict[str, int]]:
    """(operations, of them views, {analyzer: operations}): the aten operations every
    analyzer of `analyze` dispatches in its feeding methods over the whole pass (a
    ``TorchDispatchMode`` counter around each call; the forward and the runner are left out).
    The count depends on the batches, not on the machine or the device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.report.analyze import default_sections
    from attnlens.stream.runner import run_analyzers

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = self.views = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            self.views += bool(func.is_view)
            return func(*args, **(kwargs or {}))

    totals = {"ops": 0, "views": 0}
    per: dict[str, int] = {}

    def counted(method, key: str):
        def run(*args, **kwargs):
            with Counter() as counter:
                result = method(*args, **kwargs)
            totals["ops"] += counter.ops
            totals["views"] += counter.views
            per[key] = per.get(key, 0) + counter.ops
            return result
        return run

    from attnlens.report.side_work import side_workers_allowed

    sections = default_sections(LmHeads())
    for section in sections:
        if section.name == "spectrum" and SPECTRUM_SENTENCES[0] is not None:
            section.max_sentences = SPECTRUM_SENTENCES[0] or None
    everything = []
    beside = side_workers_allowed(model)  # those analyzers run beside the pass, as in analyze
    for section in sections:
        for analyzer in section.analyzers(model, tokenizer):
            if beside and analyzer.runs_beside:
                continue
            key = f"{section.name}: {type(analyzer).__name__}"
            for name in FEEDING:
                if hasattr(analyzer, name) and name not in vars(analyzer):
                    setattr(analyzer, name, counted(getattr(analyzer, name), key))
            everything.append(analyzer)
    run_analyzers(model, batches, everything, show_progress=False)
    return totals["ops"], totals["views"], per


def forward_dispatches(hf, batch) -> int:
    """The aten operations of one bare HF eager forward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.ops += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Counter():
        bare_forward(hf, batch)
    return Counter.ops


def cheapest_operations(repeats: int = 20_000) -> tuple[float, float]:
    """Seconds per operation of this device's cheapest dispatches, best of 5 loops: an
    in-place add to a one-element tensor (one kernel on a GPU: its launch) and a view."""
    x = torch.zeros(1, device=DEVICE)
    best_add = best_view = float("inf")
    for _ in range(5):
        start = now()
        for _ in range(repeats):
            x.add_(1)
        best_add = min(best_add, (now() - start) / repeats)
        start = now()
        for _ in range(repeats):
            x.view(-1)
        best_view = min(best_view, (now() - start) / repeats)
    return best_add, best_view


# The command ------------------------------------------------------------------------------
def command_figures(treebank: Path | None, max_sentences: int | None, threads: int,
                    batching: tuple[str, ...] = ()):
    """(wall seconds, run.json timings) of `attnlens analyze` in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        command = [sys.executable, "-m", "attnlens.cli", "analyze", "--out", str(out), "-q",
                   "--device", DEVICE.type, "--dtype", str(DTYPE).removeprefix("torch.")]
        if treebank:
            command += ["--treebank", str(treebank)]
        if max_sentences:
            command += ["--max-sentences", str(max_sentences)]
        if SPECTRUM_SENTENCES[0] is not None:
            command += ["--spectrum-sentences", str(SPECTRUM_SENTENCES[0])]
        command += list(batching)
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - start
        return wall, json.loads((out / "run.json").read_text(encoding="utf-8"))["timings"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-sentences", type=int, default=0, help="first N (0: all)")
    parser.add_argument("--treebank", type=Path, default=None)
    from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS

    parser.add_argument("--batch-size", type=int, default=REPORT_BATCH_SIZE)
    parser.add_argument("--batch-tokens", type=int, default=REPORT_BATCH_TOKENS,
                        help="padded tokens per batch (0: --batch-size sentences a batch)")
    parser.add_argument("--before-batch-size", type=int, default=0,
                        help="also time batches of N sentences, no budget (same process)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="bare forward and corpus pass: best of N")
    parser.add_argument("--spectrum-sentences", type=int, default=None,
                        help="the spectrum's sample, as analyze's option (default: its default)")
    parser.add_argument("--analyzer-threads", type=int, default=None,
                        help="the analyzers' intra-op threads, for the pass and the command "
                             "(ATTNLENS_ANALYZER_THREADS; 0: as many as the forward)")
    parser.add_argument("--skip-command", action="store_true")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--dispatch-floor", action="store_true",
                        help="the dispatch floor even with --pass-only or on a GPU")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-out", type=Path, default=None,
                        help="with --profile: also write the stats there (pstats, for "
                        "print_callers)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both forwards and the "
                        "analyzers; the floor is CPU-only and left out on a GPU)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="both forwards' dtype (analyze's --dtype)")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU time of this process instead of wall time (a loaded machine)")
    parser.add_argument("--pass-only", action="store_true",
                        help="only the bare forward and the corpus pass (a quick iteration)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each figure as it comes, also into a file
    torch.set_num_threads(args.threads)
    SPECTRUM_SENTENCES[0] = args.spectrum_sentences
    PROFILE_OUT[0] = args.profile_out
    if args.analyzer_threads is not None:  # read by run_analyzers, here and in the command
        os.environ["ATTNLENS_ANALYZER_THREADS"] = str(args.analyzer_threads)
    global CLOCK, DEVICE, DTYPE
    DTYPE = getattr(torch, args.dtype)
    if args.cpu:
        CLOCK = time.process_time
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda":
        args.skip_floor = True  # CPU arithmetic, not this device's
    import attnlens

    treebank = args.treebank or (SHARED_UD if SHARED_UD.is_file() else None)
    max_sentences = args.max_sentences or None
    model, tokenizer = attnlens.load(device=DEVICE, dtype=DTYPE)
    batches, max_length = load_batches(tokenizer, model, treebank, max_sentences,
                                       args.batch_size, args.batch_tokens)
    n = sum(b.size for b in batches)
    tokens = sum(int(b.attention_mask.sum()) for b in batches)
    slots = sum(b.attention_mask.numel() for b in batches)
    print(f"corpus: {treebank or 'embedded sample treebank'}: {n} sentences, {len(batches)} "
          f"batches of at most {args.batch_size} sentences and "
          f"{args.batch_tokens or 'any number of'} tokens, max length {max_length}, padding "
          f"{1 - tokens / slots:.1%}, {args.threads} threads, analyzers at "
          f"{os.environ.get('ATTNLENS_ANALYZER_THREADS') or 'the same'} threads, device "
          f"{torch.cuda.get_device_name(DEVICE) if DEVICE.type == 'cuda' else 'cpu'}, "
          f"{args.dtype}")
    print(f"clock: {'CPU time of this process' if args.cpu else 'wall time'}")
    corpus = ("UD EWT dev" if treebank and Path(treebank).name == SHARED_UD.name
              else Path(treebank).name if treebank else "the embedded sample treebank")
    corpus += f" ({n:,} sentences)"
    hf = load_hf_eager(model.cfg.source["path"])
    bare_forward(hf, batches[0])  # warm-up
    if args.before_batch_size:
        before, _ = load_batches(tokenizer, model, treebank, max_sentences,
                                 args.before_batch_size)
        rounds, old_rounds = [], []
        for i in range(args.rounds):  # the two batchings alternate, their order too
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                if which == 0:
                    rounds.append(corpus_pass(model, tokenizer, batches, hf, False, False))
                else:
                    old_rounds.append(corpus_pass(model, tokenizer, before, hf, False, False))
        old_bare, old_plain, *_ = min(old_rounds, key=lambda r: r[1])
        new_bare, new_plain, *_ = min(rounds, key=lambda r: r[1])
        print(f"batches of {args.before_batch_size} ({len(before)} batches): pass "
              f"{old_plain:.2f} s, bare forward {old_bare:.2f} s (ratio "
              f"{old_plain / old_bare:.2f}); token budget ({len(batches)} batches): pass "
              f"{new_plain:.2f} s, bare forward {new_bare:.2f} s (ratio "
              f"{new_plain / new_bare:.2f}); the pass {old_plain / new_plain:.2f}x faster "
              f"(best of {args.rounds} each)")
    else:
        rounds = [corpus_pass(model, tokenizer, batches, hf, False, False)  # no timers
                  for _ in range(args.rounds)]
    bare, plain, *_ = min(rounds, key=lambda r: r[1] / r[0])  # the best ratio of N
    bare_timed, ours, sections, per_section, totals = corpus_pass(
        model, tokenizer, batches, hf, True, args.profile)
    if args.pass_only:
        args.skip_floor = args.skip_command = True
        null = lm = 0.0
    else:
        null = null_pass_seconds(model, tokenizer, batches, sections)
        lm = lm_heads_seconds(model, sections, per_section)
    print(f"bare HF eager forward, output_attentions=True: {bare:8.2f} s")
    print(f"corpus pass (every analyzer of analyze):      {plain:8.2f} s   "
          f"ratio {plain / bare:5.2f}  (target <= 1.3)")
    print(f"  the same with a timer per analyzer:         {ours:8.2f} s   (its bare forward "
          f"{bare_timed:.2f} s)")
    print(f"null model pass (--null random-init):         {null:8.2f} s")
    print(f"language-model heads' own passes (probes...): {lm:8.2f} s")
    print(f"corpus pass + null + language-model passes:   {plain + null + lm:8.2f} s   "
          f"ratio {(plain + null + lm) / bare:5.2f}")
    print("per analyzer (seconds in its feeding methods during the pass):")
    for key, spent in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {key:48s} {spent:7.2f} s  {spent / bare_timed:5.2f}x forward")
    print(f"  {'all analyzers':48s} {sum(totals.values()):7.2f} s")
    for key, spent in BESIDE.items():
        print(f"  beside the pass (a forked child, one thread): {key} {spent:.2f} s")
    floor = floor_bare = None
    if not args.skip_floor:
        cached = cache_patterns(model, batches)
        from attnlens.measures.spectrum.section import REPORT_SENTENCES

        sample = (REPORT_SENTENCES if args.spectrum_sentences is None
                  else args.spectrum_sentences or None)
        floor_bare, parts = floor_seconds(cached, batches, hf, sample)
        del cached
        floor = sum(parts.values())
        print(f"floor: the analyzers' essential arithmetic on cached patterns {floor:7.2f} s "
              f"({floor / floor_bare:.2f}x the bare forward of {floor_bare:.2f} s beside it; "
              f"floor of the pass: {1 + floor / floor_bare:.2f}x)")
        for key, spent in parts.items():
            print(f"  {key:46s} {spent:7.2f} s")
    if not args.skip_floor or args.dispatch_floor:
        ops, views, per_ops = count_dispatches(model, tokenizer, batches)
        add, view = cheapest_operations()
        least = (ops - views) * add + views * view
        forward_ops = forward_dispatches(hf, batches[0])
        print(f"dispatch floor: the analyzers dispatch {ops:,} aten operations over the pass "
              f"({ops / len(batches):,.0f} a batch, {views:,} of them views; the bare forward "
              f"{forward_ops:,} for the first batch); at this device's cheapest operation "
              f"(an in-place add {add * 1e6:.2f} us, a view {view * 1e6:.2f} us) at least "
              f"{least:.2f} s, {least / bare:.2f}x the bare forward")
        for key, n in sorted(per_ops.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {key:48s} {n:9,d}")
        if floor is not None:
            print(f"floor of the pass, arithmetic and dispatch: "
                  f"{1 + floor / floor_bare + least / bare:.2f}x")
    if not args.skip_command:
        wall, timings = command_figures(
            treebank, max_sentences, args.threads,
            ("--batch-size", str(args.batch_size), "--batch-tokens", str(args.batch_tokens)))
        passes = timings["corpus pass (forward and every analyzer)"]
        null_cmd = timings.get("null model pass (included in total)", 0.0)
        itemised = timings.get("fixed costs", {})  # run.json's own breakdown (fixed29)
        probes = [v for k, v in itemised.items() if k.startswith("language-model probes")]
        lm_cmd = probes[0] if probes else timings["sections"].get("lm_heads", {}).get(
            "tables and figures", 0.0)
        fixed = wall - passes - null_cmd - lm_cmd
        print(f"attnlens analyze, from its start to its exit: {wall:8.2f} s (corpus pass "
              f"{passes:.2f}, null {null_cmd:.2f}, language-model heads {lm_cmd:.2f})")
        print(f"fixed costs (the command minus those passes): {fixed:8.2f} s   "
              f"(target <= 4 s); minus the corpus pass only: {wall - passes:.2f} s")
        for name, spent in itemised.items():
            print(f"  {spent:7.2f} s  {name}")
        record(f"`analyze`'s fixed costs on {corpus}: the command minus its corpus, null and "
               "language-model passes; minus the corpus pass only", "<= 4 s",
               f"{fixed:.2f} s; {wall - passes:.2f} s (command {wall:.2f} s: corpus pass "
               f"{passes:.2f}, null {null_cmd:.2f}, language-model heads {lm_cmd:.2f})",
               fixed <= 4, this_command(), key="corpus_pass.fixed")
    target = 1.2 if DEVICE.type == "cuda" else 1.3
    floors = []
    if floor is not None:
        floors.append(f"floor {floor:.2f} s = {floor / floor_bare:.2f}x the forward beside it, "
                      f"floor of the pass {1 + floor / floor_bare:.2f}x")
    if not args.skip_floor or args.dispatch_floor:
        floors.append(f"dispatch floor {least:.2f} s = {least / bare:.2f}x the forward"
                      + (f", arithmetic and dispatch {1 + floor / floor_bare + least / bare:.2f}x"
                         if floor is not None else ""))
    dtype = "" if args.dtype == "float32" else f", {args.dtype}"
    record("corpus pass (every analyzer of `analyze`) / bare HF eager forward with "
           f"`output_attentions`, same batches, interleaved, {corpus}{dtype}", f"<= {target}",
           f"{plain / bare:.2f} ({plain:.2f} s vs {bare:.2f} s, best of {args.rounds}"
           f"{', CPU time' if args.cpu else ''}" + "".join(f"; {f}" for f in floors) + ")",
           plain / bare <= target, this_command(),
           key="corpus_pass" + ("" if args.dtype == "float32" else f".{args.dtype}"),
           **({"device": torch.cuda.get_device_name(DEVICE)} if DEVICE.type == "cuda" else {}))


if __name__ == "__main__":
    main()
