"""Options of the language-model heads measure, shared by `attnlens heads` and `analyze`.

Each command lists them in its own signature (``probe_sequences: int = ProbeSequencesOpt``,
...) and calls ``lm_heads_settings(...)`` first: a plain-Python check (the probe file is
read there), before torch is imported or the model loads (docs/lm-heads.md).
"""

from __future__ import annotations

from pathlib import Path

import typer

PANEL = "Method: heads of language models"
INPUTS = {"probe_file": "token ids, one probe sequence per line",
          "sts_data": "CSV of sentence1,sentence2,score"}

ProbeSequencesOpt = typer.Option(
    200, "--probe-sequences", rich_help_panel=PANEL,
    help="Synthetic probes [first token] + R + R (previous-token, duplicate-token and "
    "induction scores); haystacks and long probes scale with it.")
ProbeLengthOpt = typer.Option(
    24, "--probe-length", rich_help_panel=PANEL, help="R: tokens of the repeated segment.")
ProbeSeedOpt = typer.Option(
    0, "--probe-seed", rich_help_panel=PANEL, help="Seed of the random probes and haystacks.")
ProbeFileOpt = typer.Option(
    None, "--probe-file", show_default=False, rich_help_panel=PANEL,
    help="Probes to use instead of random ones: one sequence of token ids per line, "
    "`first R R`.")
ProbesOpt = typer.Option(
    True, "--probes/--no-probes", rich_help_panel=PANEL,
    help="Run the synthetic probes, haystacks and long probes (--no-probes: the corpus only).")
SinkTokensOpt = typer.Option(
    4, "--sink-tokens", rich_help_panel=PANEL,
    help="First tokens a streaming head keeps (attention sinks).")
WindowOpt = typer.Option(
    64, "--window", rich_help_panel=PANEL, help="Recent tokens a streaming head keeps.")
StreamingThresholdOpt = typer.Option(
    0.1, "--streaming-threshold", rich_help_panel=PANEL,
    help="Relative output error below which a head is streaming.")
ContextOpt = typer.Option(
    32768, "--context", rich_help_panel=PANEL,
    help="Context length (tokens) of the KV-cache memory comparison.")
ControlsOpt = typer.Option(
    20, "--controls", rich_help_panel=PANEL,
    help="Random head sets ablated as the control of each role's ablation (0: none).")
AblationOpt = typer.Option(
    "zero", "--ablation", rich_help_panel=PANEL,
    help="How a head is ablated: zero (its output times 0) or mean (its mean output).")
StsDataOpt = typer.Option(
    None, "--sts-data", show_default=False, rich_help_panel=PANEL,
    help="STS CSV (sentence1,sentence2,score): the causal checks' metric for sentence "
    "encoders.")


def lm_heads_settings(probe_sequences: int, probe_length: int, probe_seed: int,
                      probe_file: Path | None, probes: bool, sink_tokens: int, window: int,
                      streaming_threshold: float, context: int, controls: int, ablation: str,
                      sts_data: Path | None):
    """The options as a checked ``LmHeadsSettings`` (plain Python: no torch)."""
    from attnlens.measures.lm_heads.settings import LmHeadsSettings

    return LmHeadsSettings(
        probes=probes, probe_sequences=probe_sequences, probe_length=probe_length,
        probe_seed=probe_seed, probe_file=probe_file, sink_tokens=sink_tokens, window=window,
        streaming_threshold=streaming_threshold, context=context, controls=controls,
        ablation=ablation, sts_data=sts_data,
    ).check()


def sts_pairs(settings):
    """The ``--sts-data`` pairs (read before the model loads), or None."""
    if settings.sts_data is None:
        return None
    from attnlens.data.pairs import read_pairs

    return read_pairs(settings.sts_data, option="--sts-data")
