#!/usr/bin/env bash
# run279 (one GPU; the build made here): 84's row softmax as the persistent GEMM's row units, each
# unit's rows of Z' first copied into the idle load ring by bulk copies (run276–run278: with the
# threads' own loads the units' bodies took 2–3 × the pass of their own; 33/39's affine now stays a
# pass). The row units' GPU tests and the fused grid test, then run276-ab.py at 84, bf16 and tf32.
LOG=run279.log
. lab/experiments/preamble.sh
. lab/experiments/start_builds.sh
wait
say "built ($(( $(date +%s) - t0 )) s)"
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_gpu.py -k "row_units or (persistent_grid and fused)" > $OUT/run279-tests.log 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/run279-tests.log | tee -a $OUT/$LOG
timeout 150 python lab/experiments/run276-ab.py ${PROBLEMS:-84} ${PRECS:-bf16,tf32} > $OUT/run279-ab.log 2>&1
say "ab: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "Warn\|_warn" $OUT/run279-ab.log | tail -n 12 | cut -c1-300 | tee -a $OUT/$LOG
