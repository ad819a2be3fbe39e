"""Every table of `attnlens analyze` under two batchings, compared (issue 29, batch30).

Runs `attnlens analyze` twice in fresh processes on the same corpus, once with
``--batch-size 16 --batch-tokens 0`` (16 sentences a batch, as before the token budget) and
once with the given batching (default: ``--batch-size 64 --batch-tokens 1024``), and compares
every CSV table both wrote: integers and labels must be equal, floats are reported as their
largest absolute and relative difference. Per-sentence analyzers must not depend on how
sentences are batched, so only float32 rounding (another padding width, another blocking of
the same sums) may show.

    python benchmarks/batch_tables.py [--treebank PATH] [--max-sentences N]
        [--batch-size N] [--batch-tokens N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ATTNLENS = Path(sys.executable).with_name("attnlens")


def run_analyze(out: Path, corpus: list[str], batching: list[str]) -> None:
    subprocess.run([str(ATTNLENS), "analyze", "--out", str(out), "--force", "--quiet",
                    *corpus, *batching], check=True)


def compare(a: Path, b: Path) -> list[tuple[str, str, float, float]]:
    """(table, what differs or 'equal'/'floats', largest absolute, largest relative)."""
    rows = []
    names = sorted({p.relative_to(a) for p in a.rglob("*.csv")}
                   | {p.relative_to(b) for p in b.rglob("*.csv")})
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.is_file() and pb.is_file()):
            rows.append((str(name), "only in one run", np.nan, np.nan))
            continue
        x, y = pd.read_csv(pa), pd.read_csv(pb)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            rows.append((str(name), f"shape {x.shape} vs {y.shape}", np.nan, np.nan))
            continue
        worst_abs = worst_rel = 0.0
        differs = []
        for column in x.columns:
            u, v = x[column], y[column]
            if pd.api.types.is_float_dtype(u.dtype) or pd.api.types.is_float_dtype(v.dtype):
                fu, fv = u.to_numpy(float), v.to_numpy(float)
                same_nan = np.isnan(fu) == np.isnan(fv)
                if not same_nan.all():
                    differs.append(f"{column} (NaN)")
                    continue
                ok = ~np.isnan(fu)
                diff = np.abs(fu[ok] - fv[ok])
                if diff.size:
                    worst_abs = max(worst_abs, float(diff.max()))
                    scale = np.maximum(np.abs(fu[ok]), np.abs(fv[ok]))
                    rel = np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)
                    worst_rel = max(worst_rel, float(rel.max()))
            elif [None if pd.isna(t) else str(t) for t in u] != [
                    None if pd.isna(t) else str(t) for t in v]:  # missing equals missing
                differs.append(column)
        what = f"differs: {', '.join(differs)}" if differs else (
            "equal" if worst_abs == 0 else "floats")
        rows.append((str(name), what, worst_abs, worst_rel))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--treebank", type=Path, default=None)
    parser.add_argument("--max-sentences", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--keep", type=Path, default=None, help="write both reports here")
    args = parser.parse_args()
    corpus = ["--treebank", str(args.treebank)] if args.treebank else []
    if args.max_sentences:
        corpus += ["--max-sentences", str(args.max_sentences)]
    new = ["--batch-size", str(args.batch_size), "--batch-tokens", str(args.batch_tokens)]
    root = args.keep or Path(tempfile.mkdtemp(prefix="batch-tables-"))
    old_dir, new_dir = root / "batch16", root / "budget"
    run_analyze(old_dir, corpus, ["--batch-size", "16", "--batch-tokens", "0"])
    run_analyze(new_dir, corpus, new)
    rows = compare(old_dir / "tables", new_dir / "tables")
    width = max(len(r[0]) for r in rows)
    for name, what, worst_abs, worst_rel in rows:
        print(f"{name:<{width}}  {what:<28} abs {worst_abs:9.2e}  rel {worst_rel:9.2e}")


if __name__ == "__main__":
    main()
