"""Every failure a user can cause is an ``AttnlensError``; the CLI prints it as one line."""

from __future__ import annotations


class AttnlensError(Exception):
    """Base class: a problem with the user's input, described with what to do about it."""


class ModelLoadError(AttnlensError):
    """A checkpoint could not be found, read or converted."""


class UnsupportedArchitectureError(ModelLoadError):
    """The checkpoint's architecture has no converter."""


class WeightMismatchError(ModelLoadError):
    """A tensor is missing, mis-shaped or left unused."""


class DeviceError(AttnlensError):
    """The requested device is not available."""


class DataError(AttnlensError):
    """An input file (text, treebank, CSV) is missing or malformed."""


class ConfigError(AttnlensError):
    """An option or configuration value is invalid."""


class RunInterrupted(BaseException):
    """Ctrl-C or SIGTERM during a command (raised by the CLI's signal handler).

    A ``BaseException`` that is not a ``KeyboardInterrupt``: Typer/Click turn a
    ``KeyboardInterrupt`` into a silent exit 130 before the CLI's handler can say what was
    kept, and no ``except Exception`` in library code swallows this one.
    """

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
