"""The report page embeds palette-quantised PNGs: smaller, same picture, files untouched."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from attnlens.report.embedded_png import embedded_png


def _heatmap_png(path, transparent: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    values = np.linspace(0, 1, 72).reshape(6, 12) ** 2
    image = ax.imshow(values, cmap="viridis")
    fig.colorbar(image)
    ax.set_title("accuracy per head")
    fig.savefig(path, transparent=transparent)
    plt.close(fig)


def _pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, "white")
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return np.asarray(flat, dtype=float)


def test_embedded_png_is_smaller_and_looks_the_same(tmp_path):
    path = tmp_path / "heatmap.png"
    _heatmap_png(path)
    before = path.read_bytes()
    data = embedded_png(path)
    assert path.read_bytes() == before  # the figure file is not rewritten
    assert len(data) < 0.6 * len(before)
    original, compact = _pixels(before), _pixels(data)
    assert original.shape == compact.shape
    # 256 palette colours for a colormap gradient and anti-aliased text: invisible at screen
    # size (measured here: mean channel error 1.43 of 255, max 14); a wrong palette or a lost
    # channel would be off by tens on average.
    error = np.abs(original - compact)
    assert error.mean() < 4.0 and error.max() < 64


def test_transparent_pixels_are_shown_on_white_not_black(tmp_path):
    path = tmp_path / "clear.png"
    _heatmap_png(path, transparent=True)
    corner = _pixels(embedded_png(path))[0, 0]
    assert corner.min() > 250  # a transparent corner embeds as white
