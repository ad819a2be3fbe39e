#!/usr/bin/env bash
# GPU readiness of attnlens in one go: the CUDA tests, the commands on the GPU, a short
# GPU benchmark (benchmarks/gpu.py), the corpus pass against the bare forward
# (benchmarks/corpus_pass.py --device cuda) and the long-input case
# (benchmarks/long_context.py --gpu). Needs only this checkout and a Python with a CUDA build
# of torch (torch >= 2.5). The other dependencies are installed into that Python if it is a
# virtual environment, else into .venv-gpu (a virtual environment that sees the system's
# torch, so no torch is downloaded); a Python that already has this checkout is used as is.
#
#   bash benchmarks/gpu_check.sh            # PYTHON=python3 by default
#   PYTHON=/opt/conda/bin/python bash benchmarks/gpu_check.sh
#   GPU_CHECK_QUICK=1 bash benchmarks/gpu_check.sh   # smaller benchmark sizes
#
# The corpus-pass and long-input steps append their figures, with the card's name, to
# benchmarks/results/gpu.jsonl (GPU_RECORD=FILE elsewhere, GPU_RECORD= nowhere; with
# GPU_CHECK_QUICK=1 they go to benchmarks/results/gpu-quick.jsonl): the GPU rows of the
# README's table (benchmarks/readme_table.py).
#
# Prints every step; the exit status is that of the first failing step (tests, commands,
# benchmark), so `&& echo ready` works. With two or more GPUs it also runs analyze under
# torchrun with NCCL and compares its tables with a one-process run.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-gpu
status=0
step() { echo; echo "== $*"; }

step "torch and the GPU"
"$PYTHON" - <<'EOF'
import sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: a CUDA build of torch and a GPU are needed")
for i in range(torch.cuda.device_count()):
    print(f"  cuda:{i} {torch.cuda.get_device_name(i)}")
EOF

step "environment"
if "$PYTHON" -c "import attnlens.cli, pytest, pathlib, sys; sys.exit(pathlib.Path(attnlens.__file__).resolve().parents[1] != pathlib.Path.cwd().resolve())" 2>/dev/null; then
    PY=$PYTHON  # already has this checkout installed
elif "$PYTHON" -c "import sys; sys.exit(sys.prefix == sys.base_prefix)"; then
    echo "  $PYTHON is a virtual environment: installing this checkout into it"
    "$PYTHON" -m pip install -q -e '.[dev,accelerate]'
    PY=$PYTHON
else
    echo "  $VENV: a virtual environment that sees the system's torch"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV"
    "$VENV/bin/python" -c "import attnlens, pytest, accelerate" 2>/dev/null \
        || "$VENV/bin/python" -m pip install -q -e '.[dev,accelerate]'
    PY="$VENV/bin/python"
fi
"$PY" -c "import torch, attnlens; assert torch.cuda.is_available(); print('  attnlens', attnlens.__version__, 'torch', torch.__version__)"
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")

step "CUDA tests (forward, half precision, analyzers, sync counts, analyze, prune, device map)"
# -rs lists skips: on a GPU machine nothing here should be skipped.
"$PY" -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py tests/test_analyzers_cuda.py \
    tests/test_heads_device.py tests/test_attention.py tests/test_loaders.py \
    tests/test_cli_analyze.py tests/test_lm_heads_cuda.py tests/test_hf_query_blocks.py \
    tests/test_folding.py tests/test_sync.py -k "cuda or device or gpu or host" || status=$?

step "attnlens analyze on the GPU (sample treebank), float32 and bfloat16"
out=$(mktemp -d)
for dtype in float32 bfloat16; do
    start=$(date +%s%N)
    "$PY" -m attnlens.cli analyze --device cuda --dtype "$dtype" --out "$out/$dtype" -q \
        || status=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "  $dtype: ${ms} ms from the command's start, $(ls "$out/$dtype/tables" 2>/dev/null | wc -l) table files"
done

if [ "$GPUS" -ge 2 ]; then
    step "torchrun, 2 processes on 2 GPUs (NCCL) against one process"
    "$PY" -m attnlens.cli analyze --device cuda --out "$out/one" -q || status=$?
    "$PY" -m torch.distributed.run --nproc-per-node 2 -m attnlens.cli analyze --device cuda \
        --out "$out/two" -q || status=$?
    "$PY" - "$out/one/tables" "$out/two/tables" <<'EOF' || status=$?
import sys
from pathlib import Path
import numpy as np
import pandas as pd
one, two = map(Path, sys.argv[1:3])
worst = 0.0
for path in sorted(one.glob("*.csv")):
    a, b = pd.read_csv(path), pd.read_csv(two / path.name)
    assert a.shape == b.shape and list(a.columns) == list(b.columns), path.name
    for c in a.columns:
        if pd.api.types.is_float_dtype(a[c]):
            d = np.abs(a[c].to_numpy() - b[c].to_numpy())
            worst = max(worst, float(np.nanmax(d)) if np.isfinite(d).any() else 0.0)
        else:
            assert a[c].equals(b[c]), f"{path.name}:{c}"
print(f"  exact columns identical; worst float difference {worst:.1e}")
EOF
fi
rm -rf "$out"

step "the attention viewer on the GPU: 2,048 tokens CPU vs GPU, 8,192 and 16,384 tokens, --generate"
"$PY" benchmarks/gpu_check_viewer.py || status=$?

step "GPU benchmark (benchmarks/gpu.py)"
"$PY" benchmarks/gpu.py ${GPU_CHECK_QUICK:+--quick} || status=$?

step "the corpus pass on the GPU against the bare HF eager forward (issue 29; UD EWT dev beside the checkout, else the sample)"
# with the dispatch floor: the analyzers' aten operations times this GPU's cheapest launch.
# This step and the long-input one record their figures with the card's name
# (benchmarks/bench_record.py) for the README's table (benchmarks/readme_table.py).
if [ -n "${GPU_CHECK_QUICK:-}" ]; then default_record=benchmarks/results/gpu-quick.jsonl
else default_record=benchmarks/results/gpu.jsonl; fi
GPU_RECORD=${GPU_RECORD-$default_record}
for dtype in float32 bfloat16; do
    ATTNLENS_BENCH_RECORD=$GPU_RECORD "$PY" benchmarks/corpus_pass.py --device cuda --pass-only \
        --dispatch-floor --rounds 3 --threads 4 --dtype "$dtype" || status=$?
done

step "long input: attnlens heads on a random 1B-class Llama at 32,768 tokens (--quick: 4,096)"
# built from a config (random weights, a local word-level tokenizer): nothing is downloaded
ATTNLENS_BENCH_RECORD=$GPU_RECORD "$PY" benchmarks/long_context.py --gpu \
    ${GPU_CHECK_QUICK:+--quick} || status=$?

echo
if [ "$status" -eq 0 ]; then echo "gpu_check: every step passed"; else echo "gpu_check: a step failed (exit $status)"; fi
exit "$status"
