"""Small builders shared by the core tests: now in ``tests/fixtures.py`` (re-exported here)."""

from __future__ import annotations

from tests.fixtures import tiny_config, tiny_inputs, tiny_model

__all__ = ["tiny_config", "tiny_inputs", "tiny_model"]
