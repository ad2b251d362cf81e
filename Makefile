# fusedlib: `make demo` runs the main job, `make test` the test suite; both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: venv test demo notebooks figures slides check-gpu kernels clean

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

# The unit tests, then every notebook under nbval (cells tagged gpu are skipped without CUDA).
test: venv
	$(BIN)/python -m pytest -q
	$(BIN)/python -m pytest -q --nbval --nbval-current-env notebooks

# Compare every stage with a float64 reference: the CPU stage algebra here, the CUDA
# kernels on a GPU machine (built on first use).
demo: venv
ifeq ($(HAS_GPU),1)
	$(BIN)/python -m fusedlib info
	$(BIN)/python -m fusedlib check --device cuda --problem all --stage all --mode all
	$(BIN)/python notebooks/run_all.py
else
	$(BIN)/python -m fusedlib info
	$(BIN)/python -m fusedlib check --device cpu --problem all --stage all --mode all
	$(BIN)/python -m pytest -q --nbval --nbval-current-env notebooks
endif

# Execute every notebook headless, in place (with a GPU the gpu cells run the kernels).
notebooks: venv
	$(BIN)/python notebooks/run_all.py

# Figures (PNG, SVG, PDF) into figures/ and the README tables, from the committed results.
figures: venv
	$(BIN)/python -m fusedlib figures
	$(BIN)/python -m fusedlib report

# reveal.js slides of the collection into slides/ (inputs of cells tagged hide-input hidden).
slides: venv
	$(BIN)/python -m pip install -q -e ".[notebooks]"
	$(BIN)/python -m jupyter nbconvert --to slides --output-dir slides \
		--TagRemovePreprocessor.remove_input_tags=hide-input notebooks/[0-9]*.ipynb

# GPU validation: writes results/<gpu>/validation.json (commit it).
check-gpu: venv
	$(BIN)/python -m pytest -m gpu tests/test_gpu.py -q

# Compile every kernel for sm_90a with nvcc and print ptxas's registers and spills.
kernels: venv
	$(BIN)/python -m pytest -q -s tests/test_kernels_compile.py

clean:
	rm -rf $(VENV) .pytest_cache
