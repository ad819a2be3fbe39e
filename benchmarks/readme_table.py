"""The README's performance table, generated from the records one `make bench` run wrote.

Reads ``benchmarks/results/bench.jsonl`` (written by the benchmarks through
``bench_record.record`` while `make bench` runs, between its ``start`` and ``end`` lines) and,
when it exists, ``benchmarks/results/gpu.jsonl`` (written by ``benchmarks/gpu_check.sh`` on a
GPU, the latest line per figure and card), and rewrites README.md between
``<!-- section:performance -->`` and ``<!-- /section:performance -->``: a sentence naming the
run (date, duration, machine, threads), then ``| figure | target | measured | command |``, one
row per record, "not met" beside a figure that misses its target. Text outside the markers is
left as it is.

    python benchmarks/readme_table.py            # rewrite README.md's section
    python benchmarks/readme_table.py --check    # exit 1 when README.md differs from the records
    python benchmarks/readme_table.py --print --records benchmarks/results/bench-quick.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks/results/bench.jsonl"
GPU_RECORDS = ROOT / "benchmarks/results/gpu.jsonl"
README = ROOT / "README.md"
BEGIN, END = "<!-- section:performance -->", "<!-- /section:performance -->"

# The rows `make bench` writes, in the table's order: key -> (figure, command) shown when a
# run wrote no record for it. Records with other keys follow, in the order they were written.
EXPECTED: dict[str, tuple[str, str]] = {
    "fixed.cli": ("`attnlens --help`; an argument error; a path error",
                  "python benchmarks/fixed_costs.py --phases"),
    "demo": ("`make demo` after set-up", "python benchmarks/demo_time.py"),
    "forward.sdpa": ("attnlens forward, no hooks / HF SDPA forward",
                     "python benchmarks/forward.py"),
    "forward.cached": ("attnlens caching every pattern / HF eager with `output_attentions`",
                       "python benchmarks/forward.py"),
    "analyze.whole": ("whole `analyze` over UD EWT dev / bare HF SDPA forward",
                      "python benchmarks/analyze_corpus.py --breakdown"),
    "corpus_pass": ("corpus pass / bare HF eager forward", "python benchmarks/corpus_pass.py"),
    "corpus_pass.fixed": ("`analyze`'s fixed costs on UD EWT dev",
                          "python benchmarks/corpus_pass.py"),
    "lm_probes": ("the language-model heads' probe passes / HF eager forward",
                  "python benchmarks/lm_probes.py"),
    "spectrum": ("spectral path / `torch.linalg.svdvals`", "python benchmarks/spectrum.py"),
    "memory": ("peak memory", "python benchmarks/memory.py"),
    "distributed": ("2 processes (`torchrun`) / 1 process", "python benchmarks/distributed.py"),
    "long.cpu.native": ("long inputs in query blocks", "python benchmarks/long_context.py"),
}
# The GPU rows' order (then by date).
GPU_ORDER = ["corpus_pass", "corpus_pass.bfloat16", "long.gpu"]
# A test, not a benchmark: its row points at the tests.
PARITY_ROW = ("parity with HF eager, fp32", "<= 1e-5 tiny models, <= 1e-4 MiniLM",
              "see the table under Models (a test, not a benchmark)",
              "pytest tests/test_parity_*.py")


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def when(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def measured_cell(measured: str, met: bool | None) -> str:
    """``"3.00 (13.73 s vs 4.57 s)"`` -> ``"**3.00, not met** (13.73 s vs 4.57 s)"``."""
    bold, sep, rest = measured.partition(" (")
    if met is False:
        bold += ", not met"
    return f"**{bold}**" + (f" ({rest}" if sep else "")


def latest_by_key(records: list[dict[str, Any]], group=lambda r: r["key"]) -> list[dict]:
    """The last record of each group, in the order the groups first appear."""
    latest: dict[Any, dict] = {}
    for item in records:
        latest[group(item)] = item
    return list(latest.values())


def card(item: dict[str, Any]) -> str:
    return item.get("device") or (item.get("machine") or {}).get("cuda") or "unknown GPU"


def shown(path: Path) -> str:
    """``path`` as the README names it: relative to the checkout when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_sentence(records: list[dict[str, Any]], source: str) -> str:
    start = next((r for r in records if r.get("kind") == "start"), None)
    end = next((r for r in reversed(records) if r.get("kind") == "end"), None)
    if start is None:
        return ("The rows below come from the records in `benchmarks/results/` (no `make bench` "
                "start line: not one run).")
    began, box = when(start["time"]), start["machine"]
    span = (f"{began:%H:%M}-{when(end['time']):%H:%M} UTC, "
            f"{duration((when(end['time']) - began).total_seconds())}" if end else
            f"from {began:%H:%M} UTC, unfinished: no end line")
    threads = box.get("threads")
    return (f"Every row but the GPU ones comes from one `make bench` run on {began:%Y-%m-%d} "
            f"({span}) on {box.get('cpu')} ({box.get('cores')} cores), "
            f"{threads if threads is not None else 'default'} threads: each benchmark recorded "
            f"what it printed in `{source}` and "
            "`benchmarks/readme_table.py` wrote this table from it. Ratios are taken in one "
            "process against a baseline measured in the same run.")


def row(figure: str, target: str, measured: str, command: str) -> str:
    return f"| {figure} | {target} | {measured} | {command} |"


def section(records: list[dict[str, Any]], gpu: list[dict[str, Any]] | None = None,
            source: str = "benchmarks/results/bench.jsonl") -> str:
    """The text between the markers (newline first and last)."""
    figures = latest_by_key([r for r in records if r.get("kind") == "figure"])
    by_key = {r["key"]: r for r in figures}
    order = [*EXPECTED, *(k for k in by_key if k not in EXPECTED)]
    lines = [row("figure", "target", "measured", "command"), "|---|---|---|---|"]
    previous = None
    for key in order:
        if key in by_key:
            item = by_key[key]
            figure, target, command = item["figure"], item["target"], item["command"]
            measured = measured_cell(item["measured"], item["met"])
        else:
            (figure, command), target = EXPECTED[key], ""
            measured = "**not measured in this run**"
        lines.append(row(figure, target, measured,
                         "same" if command == previous else f"`{command}`"))
        previous = command
    figure, target, measured, command = PARITY_ROW
    lines.append(row(figure, target, measured, f"`{command}`"))
    notes = []
    gpu_rows = latest_by_key([r for r in gpu or [] if r.get("kind") == "figure"],
                             lambda r: (r["key"], card(r)))
    gpu_rows.sort(key=lambda r: (GPU_ORDER.index(r["key"]) if r["key"] in GPU_ORDER
                                 else len(GPU_ORDER), r["time"]))
    for item in gpu_rows:
        transcribed = " (transcribed)" if item.get("source") else ""
        lines.append(row(f"{item['figure']}: {card(item)}, {item['time'][:10]}{transcribed}",
                         item["target"], measured_cell(item["measured"], item["met"]),
                         f"`{item['command']}`"))
    if gpu_rows:
        notes.append("GPU rows: the records of `benchmarks/gpu_check.sh` "
                     "(`benchmarks/results/gpu.jsonl`, the latest per figure and card), each "
                     "row with its card and date.")
        if any(item.get("source") for item in gpu_rows):
            notes.append("Rows marked (transcribed) were measured before the records existed "
                         "and copied by hand from [performance.md](docs/performance.md#gpu).")
    notes.append("Where the time goes, the floor beside each ratio and what is left: "
                 "[docs/performance.md](docs/performance.md).")
    return "\n".join(["", run_sentence(records, source), "", *lines, "", " ".join(notes), ""])


def replace_section(readme: str, body: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"README has no {BEGIN} ... {END} section")
    return pattern.sub(lambda _: BEGIN + "\n" + body + END, readme, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--gpu", type=Path, default=GPU_RECORDS)
    parser.add_argument("--readme", type=Path, default=README)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when the README's section differs from the records")
    mode.add_argument("--print", action="store_true", help="print the section, write nothing")
    args = parser.parse_args(argv)
    if not args.records.is_file():
        print(f"no records: {args.records} does not exist (run `make bench`)", file=sys.stderr)
        return 1
    gpu = read_records(args.gpu) if args.gpu.is_file() else None
    body = section(read_records(args.records), gpu, shown(args.records))
    if args.print:
        print(BEGIN + "\n" + body + END)
        return 0
    readme = args.readme.read_text(encoding="utf-8")
    updated = replace_section(readme, body)
    if args.check:
        if updated != readme:
            print(f"{args.readme}'s performance section differs from {args.records}: run "
                  "python benchmarks/readme_table.py", file=sys.stderr)
            return 1
        return 0
    if updated != readme:
        args.readme.write_text(updated, encoding="utf-8")
    print(f"{args.readme}: performance section written from {args.records}"
          + (f" and {args.gpu}" if gpu is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
