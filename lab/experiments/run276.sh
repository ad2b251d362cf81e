#!/usr/bin/env bash
# run276 (one GPU; the build made here and packed into $OUT): the fused stage's row pass as the
# persistent wgmma GEMM's row units (branch work on main, uncommitted kernels): (1) the GPU tests
# of the new route (test_row_units_match_the_row_pass: the same bits as the pass of its own, the
# route taken) and the fused stage's existing bit-identity, grid and mixed-precision tests; (2) the
# A/B timing at the KernelBench shapes, bf16 and tf32 (run276-ab.py).
LOG=run276.log
. lab/experiments/preamble.sh
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
pack_build
timeout ${TESTS_TIMEOUT:-170} python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_gpu.py \
  -k "row_units or (persistent_grid and fused) or (tile_widths and fused)" > $OUT/run276-tests.log 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 15 $OUT/run276-tests.log | tee -a $OUT/$LOG
timeout ${AB_TIMEOUT:-200} python lab/experiments/run276-ab.py ${PROBLEMS:-84,33,39} ${PRECS:-bf16,tf32} > $OUT/run276-ab.log 2>&1
say "ab: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^  " $OUT/run276-ab.log | tail -n 30 | tee -a $OUT/$LOG
