"""`attnlens heads`' statistics options, checked before anything loads (plain Python)."""

from __future__ import annotations


def head_inference(bootstrap: int, seed: int, alpha: float, correction: str, pooling: str,
                   rare_self: str, select_fraction: float):
    """The statistics options as an ``Inference``, checked before anything is loaded."""
    from attnlens.errors import ConfigError
    from attnlens.stats.bootstrap import Inference

    if rare_self not in ("include", "exclude"):
        raise ConfigError(f"--rare-self must be include or exclude, not {rare_self!r}.")
    if not 0 < select_fraction < 1:
        raise ConfigError(f"--select-fraction must lie strictly between 0 and 1, "
                          f"not {select_fraction}.")
    return Inference(bootstrap=bootstrap, seed=seed, alpha=alpha, correction=correction,
                     pooling=pooling)
