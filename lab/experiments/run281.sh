#!/usr/bin/env bash
# run281 (one H200; issue 36, item 5; prepared, not yet run): the fused GEMM's merge units load their
# columns' vectors (scale, γ, β, bias, running buffers, momentum: common.cuh column_vectors) before
# they wait for their column block's tiles, so that after the last tile only the partials' loads and
# the merge remain (run280: the merges ended 14 µs after the last tile at 84 bf16; a merge unit that
# did not wait took 6.5 µs). Same arithmetic: the same bits. Before the call, on main:
#   git archive main fusedlib pyproject.toml | gzip > lab/experiments/run281-main.tgz
#   git apply lab/experiments/run281-merge-prefetch.patch
# Then A/B against main built in the same call (ab.sh), train, bf16 and tf32, fused, sums and cuBLAS,
# kernels profiled, at the KernelBench shapes; then the GPU checks of the merges (the persistent grid
# sizes' and tile widths' bits, the KernelBench cases of the fused stage, a backward).
LOG=run281.log
. lab/experiments/preamble.sh
AB_MAIN=lab/experiments/run281-main.tgz
. lab/experiments/ab.sh
build_ab sums fused bwd
for problem in 84 33 39; do
  bench main /tmp/main $problem $problem
  bench branch $PWD $problem $problem
done
python lab/experiments/run265-table.py $OUT/ab | tee -a $OUT/$LOG
export FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33,39
timeout ${TESTS_TIMEOUT:-200} python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "(persistent_grid and fused) or (tile_widths and fused) or (case_matches and fused and not v0)" > $OUT/run281-tests.log 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 5 $OUT/run281-tests.log | tee -a $OUT/$LOG
