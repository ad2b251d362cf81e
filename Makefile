# fusedlib: `make demo` runs the main job, `make test` the test suite (minutes), `make test-kernels`
# the nvcc compile matrix of the kernels, `make lab` opens the course in JupyterLab, `make results`
# regenerates every committed GPU result (on a GPU machine); all set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIPQ ?= -q
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: venv test test-kernels demo notebooks lab figures slides check-gpu results kernels clean

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
	$(BIN)/python -m pip install $(PIPQ) -e ".[lab,dev,notebooks]"
	touch $(STAMP)

# The unit tests, then every notebook under nbval (cells tagged gpu are skipped without CUDA).
# The kernels' nvcc compile matrix is `make test-kernels`.
test: venv
	$(BIN)/python -m pytest -q --ignore=tests/test_kernels_compile.py
	$(BIN)/python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg notebooks

# Every kernel source compiled with nvcc for every architecture of fusedlib.build.ARCHS (no GPU
# needed), one nvcc per core; prints ptxas's registers and spills, fails on a spill. Without
# nvcc the tests skip (in CI, with CI set, they fail).
test-kernels: venv
	$(BIN)/python -m pytest -q -s tests/test_kernels_compile.py

# Compile every kernel and print ptxas's registers and spills (the same as test-kernels).
kernels: test-kernels

# Compare every stage with a float64 reference (the CPU algebra here, the CUDA kernels on a
# GPU machine, built on first use), then execute every notebook headless; ends with a summary.
DEMO_DEVICE := $(if $(HAS_GPU),cuda,cpu)
DEMO_NOTEBOOKS := $(if $(HAS_GPU),notebooks/ (in place: the gpu cells ran the kernels),build/notebooks/ (the committed notebooks are left as they are))
demo: venv
	$(BIN)/python -m fusedlib info
	mkdir -p build
	$(BIN)/python -m fusedlib check --device $(DEMO_DEVICE) --problem all --stage all --mode all > build/demo-check.txt \
		|| { tail -n 40 build/demo-check.txt; exit 1; }
	tail -n 1 build/demo-check.txt
	$(MAKE) --no-print-directory notebooks
	@echo
	@echo "demo done:"
	@echo "  checked: every stage (naive, fold, sums, fused) x precision (fp32, tf32, 3xtf32) x mode (train, eval)"
	@echo "           of problems 84, 33 and 39 against a float64 reference on $(DEMO_DEVICE): $$(tail -n 1 build/demo-check.txt)"
	@echo "           (the full table: build/demo-check.txt)"
	@echo "  executed: every notebook of the course, written to $(DEMO_NOTEBOOKS)"

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
# Jupyter refuses to run as root (e.g. in a container) unless given --allow-root.
LAB_ARGS ?=
lab: venv
	@if [ "$$(id -u)" = 0 ] && ! echo "$(LAB_ARGS)" | grep -q -- --allow-root; then \
		echo "make lab: running as root, which JupyterLab refuses without --allow-root;" \
		     "run as a normal user, or: make lab LAB_ARGS=--allow-root" >&2; exit 2; fi
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

# The one command that regenerates every committed GPU result, on a GPU machine (about 27 min on
# an H100), from the repository root: the validation, then one bench process for all tables
# (KernelBench shapes with ceilings and per-kernel profile, then the size sweeps appended), the
# train steps (forward + backward), the peers once more (their run-to-run spread), the README
# tables, the figures and the notebooks executed
# with the kernels. Commit results/, figures/, notebooks/ and README.md. (The one-off experiments
# that NOTES.md cites are lab/experiments/, not part of it.) The 16-bit tables: results-16bit, after.
results: check-gpu
	$(BIN)/python -m fusedlib bench --fresh --ceilings --profile
	$(BIN)/python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
		--impl stages,eager,compile,gemm_only
	$(BIN)/python -m fusedlib train-step --fresh --hold-us 2000
	# the peers' run-to-run spread (course.peer_spread): one more run of eager, compile and the GEMM
	# alone at each KernelBench shape, train mode (≈ 2 min)
	gpu=$$($(BIN)/python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))") && \
	rm -rf results/$$gpu/peers && for p in 84 33 39; do $(BIN)/python -m fusedlib bench --problem $$p --shape $$p \
		--mode train --impl eager,compile,gemm_only --remeasure --out results/$$gpu/peers/bench.csv || exit 1; done
	$(MAKE) figures notebooks

# The 16-bit tables, appended to a committed run on the same kernels (about 10 min on an H100):
# bf16 and fp16 modules and inputs at the KernelBench shapes of 84, 33 and 39, every stage and
# peer with their per-kernel profiles, then 84's in_features sweep in bf16 and tf32 (K alone at
# 1024 x K -> 8192: the lines t = a + b·K of notebook 06, about 1 min), then the train steps in bf16,
# fp16 and of the fp32 module under bf16 autocast; then the figures and notebooks that show them.
results-16bit: venv
	$(BIN)/python -m fusedlib bench --append --profile --problem 84,33,39 --precision 16bit --impl stages,eager,compile,gemm_only
	$(BIN)/python -m fusedlib bench --append --profile --problem 84 --mode train --precision bf16,tf32 \
		--sweep in_features --impl naive,sums,fused,gemm_only
	$(BIN)/python -m fusedlib train-step --precision 16bit,autocast-bf16 --hold-us 2000
	$(MAKE) figures notebooks

clean:
	rm -rf $(VENV) .pytest_cache
