"""Colour maps for the SVG figures, without matplotlib: 256-entry tables copied from
matplotlib's ``viridis`` and ``magma`` (``_r`` names reverse them), the ten ``C0``..``C9``
cycle colours, and the colour a value gets (``colour_of``).
"""

from __future__ import annotations

import math

# 256 colours each, "rrggbb" concatenated (matplotlib cm(np.linspace(0, 1, 256)), rounded).
_TABLES = {
    "viridis": (
        "44015444025645045745055946075a46085c460a5d460b5e470d60470e61471063471164471365481467481668"
        "48176948186a481a6c481b6d481c6e481d6f481f70482071482173482374482475482576482677482878482979"
        "472a7a472c7a472d7b472e7c472f7d46307e46327e46337f463480453581453781453882443983443a83443b84"
        "433d84433e85423f854240864241864142874144874045884046883f47883f48893e49893e4a893e4c8a3d4d8a"
        "3d4e8a3c4f8a3c508b3b518b3b528b3a538b3a548c39558c39568c38588c38598c375a8c375b8d365c8d365d8d"
        "355e8d355f8d34608d34618d33628d33638d32648e32658e31668e31678e31688e30698e306a8e2f6b8e2f6c8e"
        "2e6d8e2e6e8e2e6f8e2d708e2d718e2c718e2c728e2c738e2b748e2b758e2a768e2a778e2a788e29798e297a8e"
        "297b8e287c8e287d8e277e8e277f8e27808e26818e26828e26828e25838e25848e25858e24868e24878e23888e"
        "23898e238a8d228b8d228c8d228d8d218e8d218f8d21908d21918c20928c20928c20938c1f948c1f958b1f968b"
        "1f978b1f988b1f998a1f9a8a1e9b8a1e9c891e9d891f9e891f9f881fa0881fa1881fa1871fa28720a38620a486"
        "21a58521a68522a78522a88423a98324aa8325ab8225ac8226ad8127ad8128ae8029af7f2ab07f2cb17e2db27d"
        "2eb37c2fb47c31b57b32b67a34b67935b77937b87838b9773aba763bbb753dbc743fbc7340bd7242be7144bf70"
        "46c06f48c16e4ac16d4cc26c4ec36b50c46a52c56954c56856c66758c7655ac8645cc8635ec96260ca6063cb5f"
        "65cb5e67cc5c69cd5b6ccd5a6ece5870cf5773d05675d05477d1537ad1517cd2507fd34e81d34d84d44b86d549"
        "89d5488bd6468ed64590d74393d74195d84098d83e9bd93c9dd93ba0da39a2da37a5db36a8db34aadc32addc30"
        "b0dd2fb2dd2db5de2bb8de29bade28bddf26c0df25c2df23c5e021c8e020cae11fcde11dd0e11cd2e21bd5e21a"
        "d8e219dae319dde318dfe318e2e418e5e419e7e419eae51aece51befe51cf1e51df4e61ef6e620f8e621fbe723"
        "fde725"
    ),
    "magma": (
        "00000401000501010601010802010902020b02020d03030f03031204041405041606051806051a07061c08071e"
        "0907200a08220b09240c09260d0a290e0b2b100b2d110c2f120d31130d34140e36150e38160f3b180f3d19103f"
        "1a10421c10441d11471e114920114b21114e22115024125325125527125829115a2a115c2c115f2d11612f1163"
        "31116533106734106936106b38106c390f6e3b0f703d0f713f0f72400f74420f75440f76451077471078491078"
        "4a10794c117a4e117b4f127b51127c52137c54137d56147d57157e59157e5a167e5c167f5d177f5f187f601880"
        "621980641a80651a80671b80681c816a1c816b1d816d1d816e1e81701f81721f81732081752181762181782281"
        "7922827b23827c23827e24828025828125818326818426818627818827818928818b29818c29818e2a81902a81"
        "912b81932b80942c80962c80982d80992d809b2e7f9c2e7f9e2f7fa02f7fa1307ea3307ea5317ea6317da8327d"
        "aa337dab337cad347cae347bb0357bb2357bb3367ab5367ab73779b83779ba3878bc3978bd3977bf3a77c03a76"
        "c23b75c43c75c53c74c73d73c83e73ca3e72cc3f71cd4071cf4070d0416fd2426fd3436ed5446dd6456cd8456c"
        "d9466bdb476adc4869de4968df4a68e04c67e24d66e34e65e44f64e55064e75263e85362e95462ea5661eb5760"
        "ec5860ed5a5fee5b5eef5d5ef05f5ef1605df2625df2645cf3655cf4675cf4695cf56b5cf66c5cf66e5cf7705c"
        "f7725cf8745cf8765cf9785df9795df97b5dfa7d5efa7f5efa815ffb835ffb8560fb8761fc8961fc8a62fc8c63"
        "fc8e64fc9065fd9266fd9467fd9668fd9869fd9a6afd9b6bfe9d6cfe9f6dfea16efea36ffea571fea772fea973"
        "feaa74feac76feae77feb078feb27afeb47bfeb67cfeb77efeb97ffebb81febd82febf84fec185fec287fec488"
        "fec68afec88cfeca8dfecc8ffecd90fecf92fed194fed395fed597fed799fed89afdda9cfddc9efddea0fde0a1"
        "fde2a3fde3a5fde5a7fde7a9fde9aafdebacfcecaefceeb0fcf0b2fcf2b4fcf4b6fcf6b8fcf7b9fcf9bbfcfbbd"
        "fcfdbf"
    ),
}

# matplotlib's default property cycle (tab10): "C0".."C9".
CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MISSING = "#ffffff"  # a NaN cell: left blank (white), as matplotlib draws a masked value


def cycle_colour(index: int) -> str:
    """``C{index}`` of matplotlib's default cycle."""
    return CYCLE[index % len(CYCLE)]


def colour_table(name: str) -> list[str]:
    """The 256 ``#rrggbb`` colours of ``name`` (``viridis``, ``magma``, either with ``_r``)."""
    base = name[:-2] if name.endswith("_r") else name
    if base not in _TABLES:
        raise ValueError(f"unknown colour map {name!r}; use one of "
                         f"{', '.join(sorted(_TABLES))} (or NAME_r).")
    flat = _TABLES[base]
    colours = [f"#{flat[i:i + 6]}" for i in range(0, len(flat), 6)]
    return colours[::-1] if name.endswith("_r") else colours


def colour_index(value: float, vmin: float, vmax: float, n: int = 256) -> int | None:
    """Entry of an ``n``-colour table for ``value`` on ``vmin..vmax`` (clipped, as matplotlib's
    ``Normalize`` + ``Colormap`` do); None for NaN or infinity (a missing cell)."""
    if not math.isfinite(value):
        return None
    share = 0.0 if vmax <= vmin else (value - vmin) / (vmax - vmin)
    return min(n - 1, max(0, int(share * n)))


def colour_of(value: float, vmin: float, vmax: float, table: list[str]) -> str:
    """The colour ``value`` gets on ``vmin..vmax`` (``MISSING`` for NaN)."""
    index = colour_index(value, vmin, vmax, len(table))
    return MISSING if index is None else table[index]
