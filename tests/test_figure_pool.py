"""Figures drawn in worker processes land where the serial path puts them."""

from __future__ import annotations

from functools import partial

import pandas as pd
import pytest

from attnlens.errors import DataError
from attnlens.plots import layer_head_heatmap
from attnlens.report import figure_pool as figure_pool_module
from attnlens.report.figure_pool import figure_pool
from attnlens.runs.io import save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _table() -> pd.DataFrame:
    rows = [(layer, head, 0.1 * layer + 0.01 * head) for layer in range(3) for head in range(4)]
    return pd.DataFrame(rows, columns=["layer", "head", "value"])


def _boom():
    raise ValueError("recipe failed")


@pytest.mark.parametrize("workers", [0, 2])
def test_recipes_and_figures_are_written(tmp_path, workers) -> None:
    with figure_pool(workers):
        recipe = save_figure(partial(layer_head_heatmap, _table(), "recipe"), tmp_path, "a",
                             ("png",))
        ready = save_figure(layer_head_heatmap(_table(), "ready"), tmp_path, "b", ("png", "svg"))
    assert recipe == [tmp_path / "a.png"]
    assert ready == [tmp_path / "b.png", tmp_path / "b.svg"]
    for path in (*recipe, *ready):
        assert path.is_file()
    assert recipe[0].read_bytes().startswith(PNG_MAGIC)
    assert b"<svg" in ready[1].read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes left no temporary files


def test_worker_failure_is_raised_when_the_pool_ends(tmp_path) -> None:
    with pytest.raises(ValueError, match="recipe failed"), figure_pool(2):
        save_figure(_boom, tmp_path, "broken", ("png",))
    assert not (tmp_path / "broken.png").exists()


def test_svg_twins_are_written_at_once_without_starting_workers(tmp_path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(figure_pool_module, "_Pool", lambda workers: started.append(workers))
    with figure_pool(2):
        paths = save_figure(partial(layer_head_heatmap, _table(), "svg"), tmp_path, "s")
        assert paths == [tmp_path / "s.svg"] and paths[0].is_file()  # before the block ends
    assert started == []  # no matplotlib figure: no worker process was forked


def test_unknown_format_is_refused_before_drawing(tmp_path) -> None:
    with pytest.raises(DataError, match="unknown figure format"):
        save_figure(partial(layer_head_heatmap, _table(), "x"), tmp_path, "c", ("gif",))
