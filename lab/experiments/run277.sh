#!/usr/bin/env bash
# run277 (one GPU; the build made here): run276's row units taken apart. The kernels as run276's
# with the affine unit at 8 rows in flight a thread (was 4), and diagnostics ($FUSEDLIB_ROWS_DEBUG:
# 1 the row units without their bodies, 2 without their waits, 3 neither; timing only, wrong
# outputs): which part of the row units costs, against the pass of its own, in one interleaved table.
# run278 ran it again on kernels whose row bodies load Z' through L2 only (ld.global.cg):
# PROBLEMS=84,33,39 PRECS=bf16,tf32 AB_TIMEOUT=260 TESTS_K=row_units bash lab/experiments/run277.sh
LOG=run277.log
. lab/experiments/preamble.sh
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
timeout 90 python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_gpu.py -k "${TESTS_K:-row_units and bfloat16}" > $OUT/run277-tests.log 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/run277-tests.log | tee -a $OUT/$LOG
timeout ${AB_TIMEOUT:-200} python lab/experiments/run276-ab.py ${PROBLEMS:-84,33} ${PRECS:-bf16} debug > $OUT/run277-ab.log 2>&1
say "ab: rc=$? ($(( $(date +%s) - t0 )) s)"; cat $OUT/run277-ab.log | grep -v Warn | tail -n 30 | cut -c1-300 | tee -a $OUT/$LOG
