#!/usr/bin/env bash
# Issue 27 on one GPU, about 3 minutes: `attnlens heads --text --device cuda` at 32,768 tokens
# on a random 1B-class Llama-style config (16 layers, 32 heads, d_model 2,048; peak device
# memory and time), the attention-output paths at 32,768 tokens, then the CUDA query-block
# test (no synchronisation per block; block tables equal the whole-matrix path's).
# Nothing is downloaded (weights from a config, a local word-level tokenizer).
#
#   bash benchmarks/gpu_long_context.sh                  # PYTHON=python3 by default
#   PYTHON=/path/to/python bash benchmarks/gpu_long_context.sh
#
# The Python needs a CUDA build of torch and attnlens' dependencies. A Python that does not
# import this checkout's attnlens.cli gets it from .venv-gpu (a virtual environment that
# sees the system's packages, this checkout installed with --no-deps: nothing is downloaded;
# gpu_check.sh makes the same one). The log is also written to $OUT/gpu_long_context.log when
# OUT is set. Exit status: the first failing step's.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LOG=${OUT:-/tmp}/gpu_long_context.log
status=0
{
echo "== torch and the GPU"
if ! "$PYTHON" -c "import attnlens.cli" 2>/dev/null; then
    [ -x .venv-gpu/bin/python ] || "$PYTHON" -m venv --system-site-packages .venv-gpu
    .venv-gpu/bin/python -c "import attnlens.cli" 2>/dev/null \
        || .venv-gpu/bin/python -m pip install -q --no-deps --no-build-isolation -e . || exit 1
    PYTHON=.venv-gpu/bin/python
fi
"$PYTHON" -c "import torch, transformers, attnlens.cli; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))" || exit 1

echo "== attnlens heads at 32,768 tokens, 1B-class Llama (benchmarks/long_context.py --gpu)"
timeout ${LONG_CONTEXT_LIMIT:-300} "$PYTHON" benchmarks/long_context.py --gpu --rounds 1 || status=$?

echo "== CUDA query-block test (tests/test_cuda.py -k query_block)"
timeout 35 "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py -k query_block \
    || { rc=$?; [ "$status" -eq 0 ] && status=$rc; }
echo "gpu_long_context: exit $status"
exit "$status"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
