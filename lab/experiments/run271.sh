#!/usr/bin/env bash
# run271 (one GPU; the build carried as .cache when there is one, else built here and packed into
# $OUT for the next call): the GPU tests added since the suite last ran (run269b): the checks
# before the kernels on CUDA (test_modules: forward-mode AD and torch.func's transforms refused
# before a kernel reads a wrapped tensor, hooks, a frozen BatchNorm, an in-place op after 33), a
# 16-bit x under autocast with a float32 module, and a two-dimensional scale on CUDA
# (test_mixed_precision).
LOG=run271.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
pack_build
timeout ${TESTS_TIMEOUT:-300} python -m pytest -q -m gpu -p no:cacheprovider tests/test_modules.py tests/test_mixed_precision.py \
  -k "checks_before_the_kernels or autocast_takes_a_16_bit_input_on_cuda or two_dimensional_scale_runs_on_cuda" > $OUT/run271-tests.log 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 25 $OUT/run271-tests.log | tee -a $OUT/$LOG
