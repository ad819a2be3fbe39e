"""The options of the language-model heads measure, checked without torch.

``LmHeadsSettings`` holds every option `attnlens heads` and `attnlens analyze` take for it
(``--probe-sequences``, ``--probe-length``, ``--probe-seed``, ``--probe-file``,
``--no-probes``, ``--sink-tokens``, ``--window``, ``--streaming-threshold``, ``--context``,
``--controls``, ``--ablation``, ``--sts-data``); ``check()`` refuses bad values and reads the
probe file, so a mistake is one line before the model loads. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnlens.errors import ConfigError, DataError

ABLATIONS = ("zero", "mean")
# --streaming-threshold: a head is streaming when restricting it to the sink tokens and the
# window changes its output by less than this share of the output's norm: within ~6 degrees
# of its direction, about 5 % of the attention beyond sinks and window (docs/lm-heads.md).
DEFAULT_STREAMING_THRESHOLD = 0.1


@dataclass
class LmHeadsSettings:
    """Options of the measure (the CLI's names in the comments)."""

    probes: bool = True  # --no-probes turns every synthetic sequence off
    probe_sequences: int = 200  # --probe-sequences
    probe_length: int = 24  # --probe-length: R, the repeated segment
    probe_seed: int = 0  # --probe-seed
    probe_file: Path | None = None  # --probe-file: one sequence of token ids per line
    sink_tokens: int = 4  # --sink-tokens
    window: int = 64  # --window
    streaming_threshold: float = DEFAULT_STREAMING_THRESHOLD  # --streaming-threshold
    context: int = 32768  # --context: the KV-cache arithmetic's context length
    controls: int = 20  # --controls: random head sets per role ablation
    ablation: str = "zero"  # --ablation zero|mean
    sts_data: Path | None = None  # --sts-data: STS-B CSV for sentence encoders' ablations
    probe_ids: list[list[int]] | None = field(default=None, repr=False)  # the file, read

    def check(self) -> LmHeadsSettings:
        """Refuse impossible values; read ``probe_file``. Returns self."""
        positive = {"--probe-sequences": self.probe_sequences, "--probe-length": self.probe_length,
                    "--window": self.window, "--context": self.context}
        for option, value in positive.items():
            if value < 1:
                raise ConfigError(f"{option} must be at least 1, not {value}.")
        if self.sink_tokens < 0:
            raise ConfigError(f"--sink-tokens must be 0 or more, not {self.sink_tokens}.")
        if self.controls < 0:
            raise ConfigError(f"--controls must be 0 or more, not {self.controls}.")
        if not self.streaming_threshold > 0:
            raise ConfigError("--streaming-threshold must be above 0 (a relative output "
                              f"error), not {self.streaming_threshold}.")
        if self.ablation not in ABLATIONS:
            raise ConfigError(f"--ablation must be one of {', '.join(ABLATIONS)}, "
                              f"not {self.ablation!r}.")
        if self.probe_file is not None:
            if not self.probes:
                raise ConfigError("--probe-file and --no-probes contradict each other; give "
                                  "one of them.")
            self.probe_ids = read_probe_file(self.probe_file)
        return self


def read_probe_file(path: str | Path) -> list[list[int]]:
    """Probe sequences from a file: one sequence of token ids per line (spaces or commas).

    Each line is ``first R R``: a first token, then a segment of ``R >= 1`` ids and the same
    segment again (``2 R + 1`` ids); blank lines and lines starting with ``#`` are skipped.
    The model's closing special tokens (BERT's [SEP]) are added as for random probes.
    """
    from attnlens.data.files import read_utf8
    from attnlens.runs.io import check_input_file

    path = check_input_file(path, "--probe-file", "token ids, one probe sequence per line")
    sequences = []
    for number, line in enumerate(read_utf8(path).splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            ids = [int(token) for token in text.replace(",", " ").split()]
        except ValueError:
            raise DataError(f"{path}:{number}: expected token ids (integers) separated by "
                            f"spaces, got {text[:40]!r}.") from None
        if any(i < 0 for i in ids):
            raise DataError(f"{path}:{number}: token ids must be non-negative.")
        if len(ids) < 3 or len(ids) % 2 == 0:
            raise DataError(f"{path}:{number}: a probe is a first token and a segment twice "
                            f"(2 R + 1 ids, R >= 1); this line has {len(ids)} ids.")
        half = (len(ids) - 1) // 2
        if ids[1 : 1 + half] != ids[1 + half :]:
            raise DataError(f"{path}:{number}: the second half does not repeat the first (a "
                            "probe is a first token, then R ids, then the same R ids).")
        sequences.append(ids)
    if not sequences:
        raise DataError(f"{path} holds no probe sequence; write one sequence of token ids "
                        "per line.")
    return sequences
