# fusedlib: `make demo` runs the main job, `make test` the test suite, `make lab` opens the course in
# JupyterLab; all set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIPQ ?= -q
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: venv test demo notebooks lab figures slides check-gpu results kernels clean

venv: $(STAMP)

# torch first, so that `pip install -e .` finds torch>=2.11 satisfied:
# - no NVIDIA driver: the CPU build torch==2.13.0 (a plain `torch` would pull the CUDA stack);
# - NVIDIA driver: the system python's own CUDA torch >= 2.11 when it has one (the venv sees
#   the system site-packages), else torch>=2.11 from the index.
TORCH_OK := import sys, torch; v = tuple(int(p) for p in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(not (v >= (2, 11) and torch.version.cuda))

$(STAMP): pyproject.toml
ifeq ($(HAS_GPU),1)
	if $(PYTHON) -c "$(TORCH_OK)" 2>/dev/null; then \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install $(PIPQ) "torch>=2.11"; \
	fi
else
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIPQ) "torch==2.13.0"
endif
	$(BIN)/python -m pip install $(PIPQ) -e ".[dev,notebooks]"
	touch $(STAMP)

# The unit tests, then every notebook under nbval (cells tagged gpu are skipped without CUDA).
test: venv
	$(BIN)/python -m pytest -q
	$(BIN)/python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg notebooks

# Compare every stage with a float64 reference (the CPU algebra here, the CUDA kernels on a
# GPU machine, built on first use), then execute every notebook headless.
demo: venv
	$(BIN)/python -m fusedlib info
ifeq ($(HAS_GPU),1)
	$(BIN)/python -m fusedlib check --device cuda --problem all --stage all --mode all
else
	$(BIN)/python -m fusedlib check --device cpu --problem all --stage all --mode all
endif
	$(MAKE) notebooks

# Execute every notebook headless. With a GPU: in place (the gpu cells run the kernels; commit
# the outputs). Without one: into build/notebooks/, so the committed GPU outputs stay as they
# are (`python notebooks/run_all.py` executes in place anyway).
notebooks: venv
ifeq ($(HAS_GPU),1)
	$(BIN)/python notebooks/run_all.py
else
	$(BIN)/python notebooks/run_all.py --out build/notebooks
endif

# The course in JupyterLab, with the project's environment (.venv; jupyterlab comes with the
# notebooks extra's `jupyter`). Extra options: make lab LAB_ARGS="--no-browser --port 8890".
LAB_ARGS ?=
lab: venv
	$(BIN)/python -m jupyter lab notebooks/ $(LAB_ARGS)

# Figures (PNG, SVG, PDF) into figures/ and the README tables, from the committed results.
figures: venv
	$(BIN)/python -m fusedlib figures
	$(BIN)/python -m fusedlib report

# reveal.js slides of the collection into slides/ (inputs of cells tagged hide-input hidden).
slides: venv
	$(BIN)/python -m jupyter nbconvert --to slides --output-dir slides \
		--TagRemovePreprocessor.remove_input_tags=hide-input notebooks/[0-9]*.ipynb notebooks/appendix_*.ipynb

# GPU validation: the GPU suite (tests/test_gpu.py, tests/test_gpu_operator.py) in parts side by
# side; writes results/<gpu>/validation.json (commit it).
check-gpu: venv
	$(BIN)/python tests/run_gpu_suite.py

# Every GPU result the project shows, on a GPU machine (about 23 min on an H100): the
# validation, then one bench process for all tables (KernelBench shapes with ceilings and
# per-kernel profile, then the size sweeps appended), the train steps (forward + backward),
# the README tables, the figures and the notebooks executed with the kernels. Commit results/, figures/, notebooks/ and README.md.
results: check-gpu
	$(BIN)/python -m fusedlib bench --fresh --ceilings --profile
	$(BIN)/python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
		--impl stages,eager,compile,gemm_only
	$(BIN)/python -m fusedlib train-step --fresh
	$(MAKE) figures notebooks

# Compile every kernel for sm_90a with nvcc and print ptxas's registers and spills.
kernels: venv
	$(BIN)/python -m pytest -q -s tests/test_kernels_compile.py

clean:
	rm -rf $(VENV) .pytest_cache
