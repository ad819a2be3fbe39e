"""Figures as the report page embeds them: PNGs quantised to a 256-colour palette.

Matplotlib's RGBA PNGs of heatmaps and curves carry few distinct colours; a palette of 256
(fast octree) keeps them indistinguishable at screen size at about a third of the bytes, which
keeps a whole report page within its size limit. The files in ``figures/`` stay as drawn.
"""

from __future__ import annotations

import io
from pathlib import Path


def embedded_png(path: Path) -> bytes:
    """The bytes to embed for the PNG at ``path``: palette-quantised when that is smaller."""
    from PIL import Image  # matplotlib's own dependency; imported only when a page is built

    original = path.read_bytes()
    with Image.open(io.BytesIO(original)) as image:
        if image.mode not in ("RGB", "RGBA"):
            return original
        rgb = image.convert("RGBA")
        flat = Image.new("RGB", rgb.size, "white")
        flat.paste(rgb, mask=rgb.getchannel("A"))  # transparent pixels onto white, as shown
        out = io.BytesIO()
        flat.quantize(256, method=Image.Quantize.FASTOCTREE).save(out, "PNG")
    compact = out.getvalue()
    return compact if len(compact) < len(original) else original
