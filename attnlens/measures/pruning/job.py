"""What a pruning run is asked, checked before the model loads (plain Python: no torch).

``PruneJob`` holds the metric, the data and its split, the pruning settings, the L0 settings
(``--method l0``) and the export; ``PruneJob.from_options`` builds it from `attnlens prune`'s
option values, checking each as it goes. ``check_model_shape`` and ``export_target`` check it
against the model's config.json and the output folders. ``measures.pruning.folder`` runs it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlens.errors import ConfigError
from attnlens.measures.pruning.settings import PruneSettings

METHODS = ("curves", "l0")


@dataclass
class PruneJob:
    """One pruning run: ``data`` scored by ``metric`` (``auto``: from the model's head and the
    data), split in two unless ``importance_data`` is given; ``settings.orders`` replaced by
    the model's default orders when ``default_orders``; ``l0`` (an ``L0Settings``) also trains
    Hard Concrete gates; ``export`` writes the pruned model (``export_step``: after that step
    instead of the last). ``data_option`` names the data's option in messages."""

    data: Path
    metric: str = "auto"
    importance_data: Path | None = None
    eval_fraction: float = 0.5
    split_seed: int = 0
    settings: PruneSettings = field(default_factory=PruneSettings)
    default_orders: bool = False
    method: str = "curves"
    l0: Any = None
    score_range: tuple[float, float] | None = None
    export: Path | None = None
    export_step: int | None = None
    data_option: str = "--data"

    @classmethod
    def from_options(cls, *, metric: str, pairs: Path | None, data: Path | None,
                     importance_data: Path | None, eval_fraction: float, split_seed: int,
                     order: str | None, method: str, lambdas: str, l0_temperature: float,
                     l0_stretch: str, l0_steps: int, l0_lr: float, l0_init: float,
                     roles: Path | None, step: float, max_fraction: float, rescore: bool,
                     min_heads_per_layer: int, seeds: int, abs_mode: str, normalize: bool,
                     export: Path | None, export_step: int | None,
                     score_range: str | None) -> PruneJob:
        """`attnlens prune`'s options, checked in the order the command reports them."""
        from attnlens.data.pairs import parse_score_range

        metric, data, data_option = data_option_of(metric, pairs, data)
        check_options(metric, importance_data, export, export_step)
        l0 = l0_options(method, lambdas, l0_temperature, l0_stretch, l0_steps, l0_lr, l0_init,
                        min_heads_per_layer, split_seed)
        settings = PruneSettings(orders=[o.strip() for o in (order or "importance").split(",")
                                         if o.strip()],
                                 step=step, max_fraction=max_fraction, rescore=rescore,
                                 min_heads_per_layer=min_heads_per_layer, seeds=seeds,
                                 abs_mode=abs_mode, normalize=normalize,
                                 roles=None if roles is None else str(roles))
        settings.validate()
        job = cls(data=data, metric=metric, importance_data=importance_data,
                  eval_fraction=eval_fraction, split_seed=split_seed, settings=settings,
                  default_orders=order is None, method=method, l0=l0, export=export,
                  export_step=export_step, data_option=data_option)
        job._check_fraction()
        job.score_range = parse_score_range(score_range)
        job._check_data()
        return job

    def check(self) -> PruneJob:
        """Every option and data file (what ``from_options`` checks), for a job built in
        Python."""
        from attnlens.data.pairs import parse_score_range

        check_options(self.metric, self.importance_data, self.export, self.export_step)
        if self.method not in METHODS:
            raise ConfigError(f"unknown --method {self.method!r}; choose "
                              f"{' or '.join(METHODS)}.")
        if self.l0 is not None:
            self.l0.validate()
        self.settings.validate()
        self._check_fraction()
        if self.score_range is None:
            self.score_range = parse_score_range(None)
        self._check_data()
        return self

    def _check_fraction(self) -> None:
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(f"evaluation fraction must be between 0 and 1, not "
                              f"{self.eval_fraction}.")

    def _check_data(self) -> None:
        from attnlens.data.shapes import check_metric_data

        check_metric_data(self.metric, self.data, self.data_option, self.score_range)
        check_metric_data(self.metric, self.importance_data, "--importance-data",
                          self.score_range)


def data_option_of(metric: str, pairs: Path | None, data: Path | None
                   ) -> tuple[str, Path, str]:
    """``(metric, data, option)``: --pairs (metric sts) or --data, exactly one of them."""
    if (pairs is None) == (data is None):
        raise ConfigError("give the evaluation data once: --pairs FILE for sentence pairs "
                          "(sentence1,sentence2,score), else --data FILE.")
    if pairs is None:
        return metric, data, "--data"
    from attnlens.metrics import METRIC_NAMES

    if metric in METRIC_NAMES and metric != "sts":  # an unknown name: check_options says so
        raise ConfigError(f"--pairs holds sentence pairs, scored by --metric sts, not "
                          f"{metric!r}; give other data with --data.")
    return ("sts" if metric == "auto" else metric), pairs, "--pairs"


def warn_pairs_as_data(name: str, option: str) -> None:
    """Sentence pairs given as --data (the old name): works, with a warning."""
    if name == "sts" and option == "--data":
        print("Warning: --data with sentence pairs is the old spelling; use --pairs "
              "(it means the same).", file=sys.stderr)


def check_options(metric: str, importance_data: Path | None, export: Path | None,
                  export_step: int | None) -> None:
    """The metric name, the importance data's path and --export-step."""
    from attnlens.metrics import METRIC_NAMES
    from attnlens.runs.io import check_input_file

    if export_step is not None and export is None:
        raise ConfigError(f"--export-step {export_step} chooses the step --export writes, and "
                          "no --export folder was given; add --export DIR, or drop "
                          "--export-step.")
    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    check_input_file(importance_data, "--importance-data", "data")


def l0_options(method: str, lambdas: str, temperature: float, stretch: str, steps: int,
               lr: float, init: float, min_heads_per_layer: int, seed: int):
    """``L0Settings`` from the command line, or None for ``--method curves``."""
    if method not in METHODS:
        raise ConfigError(f"unknown --method {method!r}; choose {' or '.join(METHODS)}.")
    if method != "l0":
        return None
    from attnlens.numeric import parse_numbers

    values = parse_numbers("--lambda", lambdas, integer=False, low=0, example="0.001,0.01")
    low, high = parse_numbers("--l0-stretch", stretch, integer=False, count=2,
                              example="-0.1,1.1")
    from attnlens.measures.pruning.l0 import L0Settings

    settings = L0Settings(lambdas=values, temperature=temperature, stretch=(low, high),
                          steps=steps, learning_rate=lr, init_log_alpha=init,
                          min_heads_per_layer=min_heads_per_layer, seed=seed)
    settings.validate()
    return settings


def check_model_shape(job: PruneJob, model: str | None) -> None:
    """Checks that need the model's shape, read from config.json alone (no torch). Whether
    --export can write the model's family is checked by ``export_target``, after its folder:
    that check imports the converters (and torch), so the path checks come first."""
    from attnlens.loaders.checkpoint import config_shape, read_config, resolve_checkpoint

    shape = config_shape(read_config(resolve_checkpoint(model)))
    if shape is None:
        return
    n_layers, n_heads = shape
    job.settings.check_model(n_layers, n_heads)
    n_steps = len(job.settings.step_targets(n_layers * n_heads))
    if job.export_step is not None and not 0 <= job.export_step <= n_steps:
        raise ConfigError(f"--export-step {job.export_step} is outside the run, whose steps "
                          f"are 0 to {n_steps}; choose one of them.")


def check_exportable(model: str | None) -> None:
    """--export can write the model's family (imports the converter registry, hence torch)."""
    from attnlens.loaders.checkpoint import read_config, resolve_checkpoint
    from attnlens.loaders.registry import CONVERTERS

    model_type = read_config(resolve_checkpoint(model)).get("model_type")
    converter = CONVERTERS.get(model_type)
    if converter is None or converter.export is None:
        known = ", ".join(k for k, c in CONVERTERS.items() if c.export is not None)
        raise ConfigError(f"--export cannot write model_type {model_type!r}; "
                          f"export supports {known}: drop --export.")


def export_target(job: PruneJob, out: Path, model: str | None, *, force: bool = False,
                  protected=(), check_family: bool = True):
    """The --export folder (an ``OutputFolder``, checked now, written after the run), or None;
    then (``check_family``) whether MODEL's family can be exported (the one check that
    imports torch)."""
    if job.export is None:
        return None
    from attnlens.runs.outputs import OutputFolder

    exp, out = Path(job.export).resolve(), Path(out).resolve()
    if exp == out or out in exp.parents or exp in out.parents:
        raise ConfigError("--export and --out must be separate folders, neither inside the "
                          "other; choose another --export.")
    folder = OutputFolder(job.export, force=force, option="--export",
                          protected=protected).check()
    if check_family:
        check_exportable(model)
    return folder
