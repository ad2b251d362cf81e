#!/usr/bin/env bash
# run255 (one H200 or H100; about 4 minutes, no .cache): the gate of two changes on branch item5 before
# its landing, each in a commit of its own (revert the one that fails):
#   1. the register-row softmax's __expf from a 16-bit Z' (passes.cuh row_exp): run249's standalone
#      timing of the tree's row pass (its "package" row), and the fused stage's 16-bit tests at 84
#      within twice eager's error;
#   2. a 16-bit module's running buffers written in their dtype by update_running (common.cuh), with no
#      narrowing launch after the kernels: every stage's 16-bit tests of the running buffers (strided
#      vectors against contiguous ones, the last pass's Y and buffers, the eager call's bits, the
#      module's outputs and buffers within twice eager's error).
# Without a carried .cache the build comes back as flcache.part-* (take_records.py puts it in .cache),
# so that the landing's first call, on the same sources, need not build again.
LOG=run255.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
bash lab/experiments/run249.sh > /dev/null 2>&1; say "run249: rc=$? ($(( $(date +%s) - t0 )) s)"
head -n 3 $OUT/run249.log | tee -a $OUT/$LOG
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
pack_build
timeout 240 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider \
  -k "strided or last_pass or operators_bits or module_in_low_precision_within_twice_eager or (fused and 84 and within_twice_eager)" \
  > $OUT/tests.log 2>&1
say "16-bit tests: rc=$? ($(( $(date +%s) - t0 )) s) $(tail -n 1 $OUT/tests.log)"
grep "^FAILED" $OUT/tests.log | head -8 | tee -a $OUT/$LOG
