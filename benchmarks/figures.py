"""The report's figures: attnlens' own SVG writer against matplotlib, on the real figures.

Runs ``attnlens analyze`` on the embedded sample treebank once in this process
(``ATTNLENS_FIGURE_WORKERS=0``, ``--null none``), keeping every figure recipe it saves (the
same tables, titles and options as the report), then times drawing all of them, interleaved
round by round, with the process's CPU time (wall time on this shared machine is noise):

- **svg**: each recipe's SVG twin (``attnlens.plots.svg``) rendered to text (the default);
- **matplotlib png** / **matplotlib svg**: the recipe's matplotlib Figure built and saved
  (what ``--format png`` and the old default cost; matplotlib is imported and warmed first,
  so its import is not counted here);

and, in fresh processes, the import of ``matplotlib.pyplot`` (paid by any matplotlib figure,
never by the SVG writer).

``--compare DIR`` also writes every figure twice into DIR, ``NAME.svg`` (attnlens) beside
``NAME.png`` (matplotlib), and ``compare.html`` showing them side by side, for a look.

    python benchmarks/figures.py [--rounds 3] [--out DIR] [--compare DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from io import BytesIO


def capture_recipes(out: str) -> list:
    """Every figure recipe ``attnlens analyze`` saves, with its file name."""
    os.environ["ATTNLENS_FIGURE_WORKERS"] = "0"
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    from attnlens.runs import io

    recipes = []
    original = io.draw_figure

    def recording(figure, write, jobs):
        recipes.append((jobs[0][0].stem, figure))
        return original(figure, write, jobs)

    io.draw_figure = recording
    try:
        result = CliRunner().invoke(app, ["analyze", "--out", out, "--force", "--null", "none",
                                          "-q"])
    finally:
        io.draw_figure = original
    if result.exit_code != 0:
        raise SystemExit(f"analyze failed: {result.output}")
    return recipes


def draw_svg(recipe) -> int:
    from attnlens.runs.io import svg_twin

    return len(svg_twin(recipe)())


def draw_matplotlib(recipe, fmt: str) -> int:
    import matplotlib.pyplot as plt

    fig = recipe()
    buffer = BytesIO()
    fig.savefig(buffer, format=fmt, dpi=110)
    plt.close(fig)
    return len(buffer.getvalue())


def import_seconds(module: str, rounds: int) -> float:
    """Median wall seconds of ``import module`` in a fresh interpreter."""
    code = f"import time; t = time.perf_counter(); import {module}; " \
           "print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  check=True).stdout) for _ in range(rounds)]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    parser.add_argument("--compare", default=None,
                        help="write NAME.svg and NAME.png of every figure and compare.html here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipes = capture_recipes(args.out or os.path.join(tmp, "report"))
    missing = [name for name, recipe in recipes if not draw_svg(recipe)]
    print(f"{len(recipes)} figures; without an SVG twin: {missing or 'none'}")
    draw_matplotlib(recipes[0][1], "png")  # matplotlib imported and its fonts loaded
    kinds = {"svg": draw_svg, "matplotlib png": lambda r: draw_matplotlib(r, "png"),
             "matplotlib svg": lambda r: draw_matplotlib(r, "svg")}
    seconds: dict[str, list[float]] = {k: [] for k in kinds}
    sizes: dict[str, int] = {}
    for _ in range(args.rounds):
        for kind, draw in kinds.items():  # interleaved: each round draws every kind
            start = time.process_time()
            sizes[kind] = sum(draw(recipe) for _, recipe in recipes)
            seconds[kind].append(time.process_time() - start)
    print(f"{'figures drawn as':<16} {'CPU s (median)':>15} {'per figure ms':>14} {'bytes':>11}")
    for kind in kinds:
        median = statistics.median(seconds[kind])
        print(f"{kind:<16} {median:>15.3f} {1000 * median / len(recipes):>14.1f} "
              f"{sizes[kind]:>11,}")
    ratio = statistics.median(seconds["matplotlib png"]) / statistics.median(seconds["svg"])
    print(f"matplotlib png / svg: {ratio:.1f}x")
    print(f"import matplotlib.pyplot (fresh process, wall s): "
          f"{import_seconds('matplotlib.pyplot', args.rounds):.3f}")
    if args.compare:
        write_comparison(recipes, args.compare)


def write_comparison(recipes: list, folder: str) -> None:
    """Every figure as NAME.svg (attnlens) and NAME.png (matplotlib), and a page of both."""
    from pathlib import Path

    from attnlens.runs.io import svg_twin

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, recipe in recipes:
        (out / f"{name}.svg").write_text(svg_twin(recipe)(), encoding="utf-8")
        fig = recipe()
        fig.savefig(out / f"{name}.png", dpi=110)
        import matplotlib.pyplot as plt

        plt.close(fig)
        rows.append(f'<h3>{name}</h3><div style="display:flex;gap:8px">'
                    f'<img src="{name}.svg" style="max-width:50%"><img src="{name}.png" '
                    'style="max-width:50%"></div>')
    (out / "compare.html").write_text("<!doctype html><meta charset=utf-8><body>"
                                      "<p>left: attnlens SVG, right: matplotlib PNG</p>"
                                      + "".join(rows) + "</body>", encoding="utf-8")
    print(f"wrote {len(recipes)} figures twice and {out / 'compare.html'}")


if __name__ == "__main__":
    main()
