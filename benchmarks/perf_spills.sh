#!/bin/bash
# The share of one function's perf samples on instructions that address the stack
# ((%rsp) or (%rbp); "vector" when an xmm/ymm/zmm register is involved): a screen for
# accumulators spilled from registers in a kernel's hot loops (docs/performance.md, spec47).
#
#   perf record -F 2999 -o /tmp/k.data -- .venv/bin/python benchmarks/stats_kernel.py
#   benchmarks/perf_spills.sh /tmp/k.data _stats_kernel.cpython-311-x86_64-linux-gnu.so \
#       pairs.arch_x86_64_v3
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: $0 PERF_DATA DSO SYMBOL" >&2
    exit 2
fi
perf annotate -i "$1" --stdio -s "$3" --dsos "$2" 2>/dev/null | awk '
/^ +[0-9.]+ :/ { p = $1 + 0; all += p
                 if ($0 ~ /\(%r[sb]p/) { stack += p; if ($0 ~ /mm[0-9]/) vector += p } }
END { printf "on stack-relative lines %.1f%% (vector %.1f%%) of %.1f%% of the samples\n",
             stack, vector, all }'
