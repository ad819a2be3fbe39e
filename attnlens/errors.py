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
