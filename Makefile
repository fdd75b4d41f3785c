# Set-up and common tasks. Each target creates .venv and installs what it needs first.
# TORCH_SPEC picks the torch build: the default takes the CPU wheel this project is tested with;
# override it for a CUDA build, e.g. `make test TORCH_SPEC="torch==2.13.0 --index-url ..."`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
comma := ,
EXTRAS ?= test,export,demo,notebooks
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: $(STAMP)
	$(BIN)/python -m groupquant demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_fake_quant.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
