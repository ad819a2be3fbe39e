"""The pruning loop: remove heads step by step, scoring and evaluating as it goes.

Each curve (an order, and a seed for ``random`` and ``roles``) starts from the unpruned model
and removes, at step ``s``, the least important active heads until ``round(min(s * step,
max_fraction) * n_heads)`` heads are gone, never leaving a layer with fewer than
``min_heads_per_layer``. On an encoder-decoder model an order may be restricted to one
attention type (``importance:cross``): only that type's heads are removed, ``n_heads`` and
``fraction_pruned`` count that type's heads, and the other types keep all theirs.
Heads are masked (gate 0), not removed: ``structural.prune_heads`` turns a mask into a
smaller model with the same outputs. The tables name heads by their original numbers (a model
loaded from a pruned export keeps them, ``attnlens.model.head_ids``); masks and score tensors
index them by position in their layer. With ``rescore`` the order is recomputed on the pruned
model before every step (Michel's exact mode); otherwise it is computed once.

After every step the table is rewritten atomically, and the scores used are saved too, so an
interrupted run resumed with ``resume=True`` recomputes nothing it has and ends with the
same final table as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.measures.pruning.importance import score_heads, scores_table
from attnlens.measures.pruning.roles_order import read_role_heads, role_scores
from attnlens.measures.pruning.settings import SCOPES, PruneSettings
from attnlens.measures.pruning.structural import pruned_parameter_count
from attnlens.metrics.base import Metric
from attnlens.model.gates import full_mask, heads_text, parse_heads
from attnlens.model.head_ids import head_ids_of, head_positions, original_heads, renumber_heads
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer
from attnlens.progress import progress_bar
from attnlens.runs.io import atomic_open, write_table

CURVE_COLUMNS = [
    "order", "seed", "step", "n_pruned", "fraction_pruned", "heads_removed", "metric",
    "change", "params", "seconds",
]
SCORE_COLUMNS = ["order", "seed", "scored_after_step", "layer", "head", "score"]
CURVE_FILE, SCORES_FILE, SETTINGS_FILE = "prune_curve", "prune_scores", "prune_settings.json"


def select_heads(
    scores: torch.Tensor, mask: torch.Tensor, n_remove: int, min_heads_per_layer: int
) -> list[tuple[int, int]]:
    """The ``n_remove`` active heads of lowest score, keeping ``min_heads_per_layer`` each.

    Ties go to the lower layer, then the lower head. Fewer heads come back when the
    per-layer minimum forbids more.
    """
    alive = (mask != 0).sum(dim=1).tolist()  # [layer]
    candidates = sorted(
        (float(scores[layer, head]), layer, head)
        for layer, head in (mask != 0).nonzero().tolist()
    )
    chosen = []
    for score, layer, head in candidates:
        if len(chosen) == n_remove:
            break
        if math.isnan(score):
            raise ConfigError(f"head L{layer}H{head} has no score; cannot order it.")
        if alive[layer] > min_heads_per_layer:
            chosen.append((layer, head))
            alive[layer] -= 1
    return sorted(chosen)


@dataclass
class PruneResult:
    curve: pd.DataFrame
    scores: pd.DataFrame
    baseline: float


class PruneRun:
    """One pruning run over several curves, written to ``out_dir`` after every step."""

    def __init__(
        self,
        model: HookedTransformer,
        importance_metric: Metric,
        eval_metric: Metric,
        settings: PruneSettings,
        out_dir: str | Path | None = None,
        description: dict | None = None,
        show_progress: bool = False,
        on_step: Callable[[dict], None] | None = None,
    ) -> None:
        settings.validate()
        self.model, self.settings = model, settings
        self.importance_metric, self.eval_metric = importance_metric, eval_metric
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.description = dict(description or {})
        self.show_progress, self.on_step = show_progress, on_step
        self.start_mask = full_mask(model)
        self.n_heads = int(self.start_mask.sum())
        self.head_ids = head_ids_of(model)  # tables: original numbers; masks: positions
        settings.check_model(*self.start_mask.shape)  # [layer, head]
        self.targets = settings.step_targets(self.n_heads)
        self.scopes = scope_masks(model, self.start_mask)
        for order in settings.orders:
            scope = order.partition(":")[2]
            if scope and scope not in self.scopes:
                raise ConfigError(f"order {order!r} needs an encoder-decoder model (attention "
                                  "types encoder, decoder, cross).")
        self.roles = read_role_heads(settings.roles) if settings.roles else None
        if self.roles is not None:
            self.description["roles_from"] = self.roles.source
        self.rows: list[dict] = []
        self.score_frames: list[pd.DataFrame] = []

    def _scope(self, order: str) -> torch.Tensor:
        """``[layer, head]`` 1 where the order may remove heads (its attention type)."""
        scope = order.partition(":")[2]
        return self.scopes[scope] if scope else (self.start_mask != 0).to(self.start_mask)

    # Files -------------------------------------------------------------------------------
    def _record(self) -> dict:
        settings = asdict(self.settings)
        if settings["roles"] is None:  # runs without --roles keep the record they always had
            del settings["roles"]
        return {"settings": settings, **self.description}

    def _load_previous(self) -> None:
        out = self.out_dir
        settings_path = out / SETTINGS_FILE
        curve_path = out / f"{CURVE_FILE}.csv"
        if not curve_path.is_file():
            return
        if not settings_path.is_file():
            raise DataError(f"{out} has {curve_path.name} but no {SETTINGS_FILE}; "
                            "cannot check that --resume continues the same run.")
        try:
            saved = json.loads(settings_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{settings_path} is damaged ({exc}); cannot check that --resume "
                            "continues the same run: start over with --force.") from exc
        current = json.loads(json.dumps(self._record()))  # as it would be saved
        if saved != current:
            changed = sorted(k for k in set(saved) | set(current)
                             if saved.get(k) != current.get(k))
            raise ConfigError(
                f"the run in {out} used different settings ({', '.join(changed)}); "
                "rerun with the same options, or choose another --out without --resume."
            )
        try:
            curve = pd.read_csv(curve_path, keep_default_na=False)
            scores_path = out / f"{SCORES_FILE}.csv"
            scores = pd.read_csv(scores_path) if scores_path.is_file() else None
        except (OSError, ValueError) as exc:  # pandas' parser errors are ValueErrors
            raise DataError(f"the saved tables in {out} are damaged ({exc}); start over "
                            "with --force.") from exc
        if list(curve.columns) != CURVE_COLUMNS or (
            scores is not None and list(scores.columns) != SCORE_COLUMNS
        ):
            raise DataError(f"the saved tables in {out} do not have the pruning columns; "
                            "start over with --force.")
        self.rows = curve.to_dict("records")
        for row in self.rows:  # a run of an older version wrote 2.8: continue in L2H8
            try:
                row["heads_removed"] = heads_text(parse_heads(row["heads_removed"]))
            except ConfigError as exc:
                raise DataError(f"the saved tables in {out} are damaged ({exc}); start over "
                                "with --force.") from exc
        if scores is not None:
            self.score_frames = [scores]

    def _write(self) -> None:
        if self.out_dir is None:
            return
        # Scores first: a run killed between the two files then has scores for a step whose
        # row is missing (resume reuses them), never a row whose scores are lost.
        write_table(self.scores(), self.out_dir, SCORES_FILE, formats=("csv",))
        write_table(self.curve(), self.out_dir, CURVE_FILE, formats=("csv",))

    def curve(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.rows, columns=CURVE_COLUMNS)

    def scores(self) -> pd.DataFrame:
        frames = [f for f in self.score_frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=SCORE_COLUMNS)
        return pd.concat(frames, ignore_index=True)[SCORE_COLUMNS]

    # Scoring -------------------------------------------------------------------------------
    def _scores(self, order: str, seed: int, after_step: int, mask: torch.Tensor) -> torch.Tensor:
        """Scores used at a step: saved ones when resuming, else computed and saved."""
        key_step = after_step if self.settings.rescore else 0
        table = self.scores()
        if len(table):
            saved = table[(table["order"] == order) & (table["seed"] == seed)
                          & (table["scored_after_step"] == key_step)]
            if len(saved):
                scores = torch.full(mask.shape, float("nan"), dtype=torch.float64)
                for layer, head, value in saved[["layer", "head", "score"]].itertuples(
                    index=False
                ):
                    (_, position), = head_positions(self.head_ids, [(int(layer), int(head))])
                    scores[int(layer), position] = float(value)
                return scores
        base = order.partition(":")[0]
        if base == "roles":
            scores = role_scores(self.model, self.roles, seed)
        else:
            scores = score_heads(
                base, self.model, self.importance_metric, mask, seed,
                self.settings.abs_mode, self.settings.normalize, self.show_progress,
            )
        self.score_frames.append(renumber_heads(
            scores_table(scores, order=order, seed=seed, scored_after_step=key_step),
            self.head_ids))
        return scores

    # The loop ----------------------------------------------------------------------------
    def _append(self, row: dict) -> None:
        self.rows.append(row)
        self._write()
        if self.on_step is not None:
            self.on_step(row)

    def run(self, resume: bool = False) -> PruneResult:
        if self.out_dir is not None:
            if resume:
                self._load_previous()
            else:
                self.rows, self.score_frames = [], []
            with atomic_open(self.out_dir / SETTINGS_FILE) as handle:
                json.dump(self._record(), handle, indent=2)
        baseline_rows = [r for r in self.rows if int(r["step"]) == 0]
        if baseline_rows:
            baseline = float(baseline_rows[0]["metric"])
            baseline_seconds = float(baseline_rows[0]["seconds"])
        else:
            start = time.perf_counter()
            baseline = self.eval_metric.evaluate(self.model, self.start_mask)
            baseline_seconds = time.perf_counter() - start
        total_steps = sum(len(self.settings.step_targets(int(self._scope(o).sum())))
                          for o, _ in self.settings.curves())
        with progress_bar("pruning steps", total=total_steps, enabled=self.show_progress) as adv:
            for order, seed in self.settings.curves():
                self._run_curve(order, seed, baseline, baseline_seconds, adv)
        self._write()
        return PruneResult(self.curve(), self.scores(), baseline)

    def _run_curve(self, order, seed, baseline, baseline_seconds, advance) -> None:
        done = [r for r in self.rows if r["order"] == order and int(r["seed"]) == seed]
        mask = self.start_mask.clone()
        scope = self._scope(order)
        targets = self.settings.step_targets(int(scope.sum()))
        for row in done:
            for layer, head in head_positions(self.head_ids, parse_heads(row["heads_removed"])):
                mask[layer, head] = 0.0
        if not done:
            self._append(self._row(order, seed, 0, mask, [], baseline, baseline,
                                   baseline_seconds))
        first = max((int(r["step"]) for r in done), default=0) + 1
        advance(min(first - 1, len(targets)))
        for step in range(first, len(targets) + 1):
            start = time.perf_counter()
            scores = self._scores(order, seed, step - 1, mask)
            n_pruned = int((mask[self.start_mask != 0] == 0).sum())
            removed = select_heads(scores, mask * scope, targets[step - 1] - n_pruned,
                                   self.settings.min_heads_per_layer)
            if not removed:
                advance(len(targets) - step + 1)
                break
            for layer, head in removed:
                mask[layer, head] = 0.0
            value = self.eval_metric.evaluate(self.model, mask)
            seconds = time.perf_counter() - start
            self._append(self._row(order, seed, step, mask, removed, value, baseline, seconds))
            advance(1)

    def _row(self, order, seed, step, mask, removed, value, baseline, seconds) -> dict:
        n_pruned = int((mask[self.start_mask != 0] == 0).sum())
        return {
            "order": order,
            "seed": seed,
            "step": step,
            "n_pruned": n_pruned,
            "fraction_pruned": n_pruned / int(self._scope(order).sum()),
            "heads_removed": heads_text(original_heads(self.head_ids, removed)),
            "metric": float(value),
            "change": float(self.eval_metric.improvement(value, baseline)),
            "params": pruned_parameter_count(self.model, mask),
            "seconds": round(seconds, 3),
        }


def scope_masks(model, start_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per attention type, ``[layer, head]`` 1 on its gate rows (encoder-decoder models)."""
    if not has_several_attention_types(model):
        return {}
    rows = model.attention_layers
    masks = {}
    for attention in SCOPES:
        scope = torch.zeros_like(start_mask)
        for index, row in enumerate(rows):
            if row.attention == attention:
                scope[index] = start_mask[index]
        masks[attention] = scope
    return masks


def final_mask(model: HookedTransformer, curve: pd.DataFrame, order: str, seed: int = 0,
               step: int | None = None) -> torch.Tensor:
    """The head mask after ``step`` (default: the last) of one curve of a result table
    (heads named by their original numbers, masked at their positions)."""
    rows = curve[(curve["order"] == order) & (curve["seed"] == seed)]
    if step is not None:
        rows = rows[rows["step"] <= step]
    mask = full_mask(model)
    head_ids = head_ids_of(model)
    for text in rows["heads_removed"]:
        for layer, head in head_positions(head_ids, parse_heads(text)):
            mask[layer, head] = 0.0
    return mask
