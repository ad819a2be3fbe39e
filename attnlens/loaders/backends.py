"""The backend names ``load`` accepts (light: the CLI checks ``--backend`` before any import).

``native``: attnlens' own HookedTransformer from a converter; ``hf``: the Hugging Face model run
through transformers' attention interface; ``auto``: native when a converter exists and
accepts the config, else hf.
"""

from __future__ import annotations

from attnlens.errors import ConfigError

BACKENDS = ("auto", "native", "hf")


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}.")
