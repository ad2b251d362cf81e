#!/usr/bin/env bash
# run233 (one H200 or H100; issue 36): the first GPU check of branch ztma (Z' in a 16-bit module's
# dtype at sums and fused, through the TMA epilogue on wgmma), before its landing: every stage and
# the backward built (no carried cache: its parts come back as flcache.part-*, to carry as .cache
# in the landing's calls), the new GPU tests, the fused stage's bf16 forward kernels against cuBLAS
# at the presets (run233-time.py), then the rest of the GPU tests of tests/test_mixed_precision.py
# in the time left. Returns run233.log, run233-*.csv, flcache.part-*. About 9 minutes: give it 590 s.
LOG=run233.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
timeout 240 python -m pytest -m gpu -q -x tests/test_mixed_precision.py -k "sixteen_bit_z or reads_a_sixteen" \
  > $OUT/run233-new-tests.out 2>&1
say "new tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 6 $OUT/run233-new-tests.out | tee -a $OUT/$LOG
timeout 90 python lab/experiments/run233-time.py > $OUT/run233-time.out 2>&1
say "timing: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 12 $OUT/run233-time.out | tee -a $OUT/$LOG
left=$(( 575 - ($(date +%s) - t0) ))
timeout $left python -m pytest -m gpu -q tests/test_mixed_precision.py tests/test_gpu_operator.py \
  > $OUT/run233-mixed.out 2>&1
say "test_mixed_precision + test_gpu_operator (GPU, ${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"
grep -h "^FAILED\|passed\|failed" $OUT/run233-mixed.out | tail -n 12 | tee -a $OUT/$LOG
