# fusedlib: `make demo` runs the main job, `make test` the test suite; both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: venv test demo check-gpu kernels clean

venv: $(STAMP)

# CPU-only machines take the CPU build of torch (a plain `torch` would pull the CUDA stack).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),1)
	$(BIN)/python -m pip install -q "torch>=2.11"
else
	$(BIN)/python -m pip install -q "torch==2.13.0"
endif
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q

# Compare every stage with a float64 reference: the CPU stage algebra here, the CUDA
# kernels on a GPU machine (built on first use).
demo: venv
ifeq ($(HAS_GPU),1)
	$(BIN)/python -m fusedlib info
	$(BIN)/python -m fusedlib check --device cuda --problem all --stage all --mode all
else
	$(BIN)/python -m fusedlib info
	$(BIN)/python -m fusedlib check --device cpu --problem all --stage all --mode all
endif

# GPU validation: writes results/<gpu>/validation.json (commit it).
check-gpu: venv
	$(BIN)/python -m pytest -m gpu tests/test_gpu.py -q

# Compile every kernel for sm_90a with nvcc and print ptxas's registers and spills.
kernels: venv
	$(BIN)/python -m pytest -q -s tests/test_kernels_compile.py

clean:
	rm -rf $(VENV) .pytest_cache
