#!/usr/bin/env bash
# run255 (one H200 or H100; about 3 minutes, no .cache): branch item5's __expf in the register-row
# softmax from a 16-bit Z' (passes.cuh row_exp): run249's standalone timing of the tree's row pass
# (its "package" row) beside the fused stage's build, then the fused stage's 16-bit GPU tests at 84
# (within twice eager's error on each GEMM path, the last pass's 16-bit Y the float32 Y rounded, the
# eager call's bits).
LOG=run255.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-fused.log 2>&1 &
bash lab/experiments/run249.sh > /dev/null 2>&1; say "run249: rc=$? ($(( $(date +%s) - t0 )) s)"
head -n 3 $OUT/run249.log | tee -a $OUT/$LOG
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
timeout 120 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider -x \
  -k "fused and 84 and (within_twice_eager or last_pass or operators_bits)" > $OUT/tests.log 2>&1
say "16-bit tests: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/tests.log)"
grep "^FAILED" $OUT/tests.log | head -5 | tee -a $OUT/$LOG
