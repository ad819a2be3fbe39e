"""A pruning run's evaluations spread across ``torchrun`` processes.

Every evaluation of the metric is independent once its head mask is known:

1. the unpruned baseline and each curve's scores (importance, confidence, ...: one task per
   curve, computed on the unpruned model as a single process does without ``--rescore``);
2. every step of every curve: each rank replays the head selection from the shared scores
   (``select_heads`` is deterministic), so all ranks know every step's mask, and evaluates
   the steps dealt to it.

With ``--rescore`` a curve's steps depend on each other, so a whole curve is one task. Tasks
go round-robin to the ranks (``distributed.spread``); rank 0 assembles the rows in the
single-process order and writes the tables once at the end (no per-step files, so
``--resume`` is for single-process runs).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from attnlens.distributed import DistContext, spread
from attnlens.errors import ConfigError
from attnlens.measures.pruning.importance import score_heads, scores_table
from attnlens.measures.pruning.loop import SETTINGS_FILE, PruneResult, PruneRun, select_heads


def _timed(fn, *args) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def _scores(run: PruneRun, order: str, seed: int) -> torch.Tensor:
    s = run.settings
    return score_heads(order, run.model, run.importance_metric, run.start_mask, seed,
                       s.abs_mode, s.normalize, False)


def _steps(run: PruneRun, scores: torch.Tensor) -> list[tuple[list, torch.Tensor]]:
    """``(removed, mask)`` after each step of a curve scored once (no ``--rescore``)."""
    mask, steps = run.start_mask.clone(), []
    for target in run.targets:
        n_pruned = int((mask[run.start_mask != 0] == 0).sum())
        removed = select_heads(scores, mask, target - n_pruned, run.settings.min_heads_per_layer)
        if not removed:
            break
        for layer, head in removed:
            mask[layer, head] = 0.0
        steps.append((removed, mask.clone()))
    return steps


def _rescored_curve(run: PruneRun, order: str, seed: int) -> list[tuple]:
    """A ``--rescore`` curve on one rank: ``(step, removed, mask, value, seconds, scores)``."""
    mask, out = run.start_mask.clone(), []
    for step, target in enumerate(run.targets, start=1):
        start = time.perf_counter()
        s = run.settings
        scores = score_heads(order, run.model, run.importance_metric, mask, seed,
                             s.abs_mode, s.normalize, False)
        n_pruned = int((mask[run.start_mask != 0] == 0).sum())
        removed = select_heads(scores, mask, target - n_pruned, s.min_heads_per_layer)
        if not removed:
            break
        for layer, head in removed:
            mask[layer, head] = 0.0
        value = run.eval_metric.evaluate(run.model, mask)
        out.append((step, removed, mask.clone(), value, time.perf_counter() - start, scores))
    return out


def prune_spread(run: PruneRun, ctx: DistContext, resume: bool = False) -> PruneResult:
    """``run.run()`` with its evaluations spread over ``ctx``'s ranks (module docstring)."""
    if resume:
        raise ConfigError("--resume continues single-process runs; rerun without torchrun "
                          "or without --resume.")
    curves = run.settings.curves()
    rescore = run.settings.rescore

    def first_phase(task: tuple) -> Any:
        kind, order, seed = task
        if kind == "baseline":
            return _timed(run.eval_metric.evaluate, run.model, run.start_mask)
        if kind == "scores":
            return _timed(_scores, run, order, seed)
        return _rescored_curve(run, order, seed)

    tasks = [("baseline", "", 0)] + [("curve" if rescore else "scores", o, s) for o, s in curves]
    first = spread(tasks, first_phase, ctx)
    (baseline, baseline_seconds), per_curve = first[0], first[1:]
    if rescore:
        evaluated = per_curve
    else:
        plans = [_steps(run, scores) for scores, _ in per_curve]
        jobs = [(c, i) for c, plan in enumerate(plans) for i in range(len(plan))]
        values = spread(jobs, lambda job: _timed(run.eval_metric.evaluate, run.model,
                                                 plans[job[0]][job[1]][1]), ctx)
        evaluated, at = [], 0
        for c, plan in enumerate(plans):
            steps = []
            for i, (removed, mask) in enumerate(plan):
                value, seconds = values[at]
                at += 1
                if i == 0:
                    seconds += per_curve[c][1]  # a single process scores inside step 1
                steps.append((i + 1, removed, mask, value, seconds, per_curve[c][0]))
            evaluated.append(steps)
    return _assemble(run, ctx, curves, evaluated, baseline, baseline_seconds)


def _assemble(run: PruneRun, ctx, curves, evaluated, baseline, baseline_seconds) -> PruneResult:
    """Rows and score tables in the single-process order; rank 0 writes them."""
    run.rows, run.score_frames = [], []
    for (order, seed), steps in zip(curves, evaluated, strict=True):
        run.rows.append(run._row(order, seed, 0, run.start_mask, [], baseline, baseline,
                                 baseline_seconds))
        for step, removed, mask, value, seconds, scores in steps:
            if run.settings.rescore or step == 1:  # the score tables a single process saves
                key = step - 1 if run.settings.rescore else 0
                run.score_frames.append(scores_table(scores, order=order, seed=seed,
                                                     scored_after_step=key))
            run.rows.append(run._row(order, seed, step, mask, removed, value, baseline, seconds))
    if ctx.is_main and run.out_dir is not None:
        import json

        from attnlens.runs.io import atomic_open

        with atomic_open(run.out_dir / SETTINGS_FILE) as handle:
            json.dump(run._record(), handle, indent=2)
        run._write()
    return PruneResult(run.curve(), run.scores(), baseline)
