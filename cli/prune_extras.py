"""Helpers of `attnlens prune` for ``--method l0``, ``--order roles`` and encoder-decoder models.

Not a command (no ``register``): ``cli/prune.py`` calls these.
"""

from __future__ import annotations

from pathlib import Path

from attnlens.cli.runner import CommandRun

ORDER_HELP = (
    "Comma-separated orders: importance, random, confidence, entropy, loo, roles (heads with "
    "a tested role from --roles kept, the others first). Encoder-decoder models: ORDER:encoder, "
    "ORDER:decoder, ORDER:cross prune one attention type only. Default: importance,random,"
    "confidence; encoder-decoder: importance and importance per type, random; --method l0: "
    "importance,random."
)
METHODS = ("curves", "l0")


def l0_options(method: str, lambdas: str, temperature: float, stretch: str, steps: int,
               lr: float, init: float, min_heads_per_layer: int, seed: int):
    """``L0Settings`` from the command line, or None for ``--method curves`` (checked before
    the model is loaded)."""
    from attnlens.errors import ConfigError

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


def default_orders(model, method: str) -> list[str]:
    from attnlens.model.protocol import has_several_attention_types

    if has_several_attention_types(model):
        return ["importance", "importance:encoder", "importance:decoder", "importance:cross",
                "random"]
    return ["importance", "random"] if method == "l0" else ["importance", "random", "confidence"]


def check_model_options(model, orders: list[str], export: Path | None) -> None:
    """Refuse what an encoder-decoder model cannot do (attention-statistic orders, export)."""
    from attnlens.errors import ConfigError
    from attnlens.model.protocol import has_several_attention_types, missing_parts

    if export is not None:
        missing = missing_parts(model, ["blocks"])
        if missing:
            raise ConfigError(f"--export removes heads from attnlens' own (native) model; "
                              f"{missing['blocks']}.")
    if not has_several_attention_types(model):
        return
    bad = [o for o in orders if o.partition(":")[0] in ("confidence", "entropy")]
    if bad:
        raise ConfigError(f"order {bad[0]!r} reads one stack's attention statistics; on an "
                          "encoder-decoder model use importance, random, loo or roles.")
    if export is not None:
        raise ConfigError("--export: structural pruning of encoder-decoder models is not "
                          "supported yet; prune_curve.csv lists the heads removed.")


def write_attention_tables(run: CommandRun, model, result, out: Path) -> None:
    """Which attention type's heads go first (encoder-decoder models)."""
    from attnlens.measures.pruning.attention_tables import (
        attention_first,
        describe_rows,
        removed_by_attention,
    )
    from attnlens.runs.io import write_table

    write_table(describe_rows(model), out, "prune_rows")
    write_table(removed_by_attention(model, result.curve), out, "prune_by_attention")
    first = attention_first(model, result.scores)
    write_table(first, out, "prune_attention_first")
    for row in first.itertuples(index=False):
        run.note(f"  {row.order}: {row.attention} heads at mean rank {row.mean_rank:.2f} "
                 f"(0 = pruned first); {row.first_quarter} of the first quarter "
                 f"({row.first_quarter_if_even:.1f} if mixed evenly)")


def write_l0(run: CommandRun, model, metrics, settings, result, out: Path, resume: bool,
             description: dict, metric_name: str):
    """Train the L0 gates for every lambda; tables and the chart beside the curves."""
    from attnlens.measures.pruning.l0_run import compare_with_curves, run_l0
    from attnlens.plots import l0_against_curves, l0_training_curves
    from attnlens.runs.io import save_figure, write_table

    summary, heads, curve = run_l0(model, metrics.importance, metrics.evaluation, settings,
                                   result.baseline, out, resume, description, run.show_progress)
    write_table(compare_with_curves(summary, result.curve), out, "l0_comparison")
    for table_name, table in (("l0_summary", summary), ("l0_heads", heads)):
        write_table(table, out, table_name, formats=("md",))
    fig = l0_against_curves(result.curve, summary, metrics.evaluation.label,
                            f"{metric_name} on held-out data: L0 gates vs pruning orders")
    save_figure(fig, out, "prune_l0", run.output.formats)
    save_figure(l0_training_curves(curve, "L0 gate training"), out, "l0_training",
                run.output.formats)
    return summary


def note_l0(run: CommandRun, summary, baseline: float, label: str) -> None:
    from attnlens.metrics.change import change_text

    for row in summary.itertuples(index=False):
        run.note(f"  L0 lambda {row[0]:g}: {row.n_kept} heads kept (per layer "
                 f"{row.kept_per_layer}): {label} "
                 f"{change_text(baseline, row.metric, row.change)}")
