"""One JSON line per measured figure, for the README's performance table.

``record(...)`` appends a line to the file named by ``ATTNLENS_BENCH_RECORD`` and does nothing
when that variable is unset, so a benchmark run by hand prints as before and writes nothing.
`make bench` sets it to ``benchmarks/results/bench.jsonl`` (``bench-quick.jsonl`` with
``QUICK=1``) and ``benchmarks/gpu_check.sh`` to ``benchmarks/results/gpu.jsonl``;
``benchmarks/readme_table.py`` builds the README's table from those lines.

A line: ``{"kind": "figure", "key", "figure", "target", "measured", "met", "command", "time",
"machine", ...details}``. ``measured`` is the printed figure, then its supporting numbers in
parentheses (``"3.00 (13.73 s vs 4.57 s)"``): the table bolds the part before the first
``" ("``. ``met`` is True, False or None (no target).

    python benchmarks/bench_record.py start|end   # the run's start and end lines (make bench)
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ENV = "ATTNLENS_BENCH_RECORD"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threads() -> int | None:
    """torch's intra-op threads when this process imported torch, else OMP_NUM_THREADS."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.get_num_threads())
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else None


def cuda_name() -> str | None:
    """The first CUDA device's name when this process imported torch and sees one."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": threads(),
            "cuda": cuda_name()}


def this_command() -> str:
    """How this benchmark was started: ``python benchmarks/NAME.py ARGS``."""
    script = Path(sys.argv[0])
    return " ".join(["python", f"benchmarks/{script.name}", *sys.argv[1:]])


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(line: dict[str, Any]) -> bool:
    """Append ``line`` to the record file; False (nothing written) when the variable is unset."""
    path = os.environ.get(ENV)
    if not path:
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return True


def record(figure: str, target: str, measured: str, met: bool | None, command: str,
           **details: Any) -> bool:
    """Record one row of the performance table (see the module's docstring)."""
    line = {"kind": "figure", "figure": figure, "target": target, "measured": measured,
            "met": met, "command": command, "time": now(), "machine": machine(), **details}
    line.setdefault("key", figure)
    return write(line)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["start"], ["end"]):
        print("usage: python benchmarks/bench_record.py start|end", file=sys.stderr)
        return 2
    write({"kind": argv[0], "time": now(), "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
