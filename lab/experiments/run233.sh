#!/usr/bin/env bash
# run233 (one H200 or H100; issue 36): the GPU check of branch ztma (Z' in a 16-bit module's
# dtype at sums and fused, through the TMA epilogue on wgmma), before its landing: every stage and
# the backward built (no carried cache: its parts come back as flcache.part-*, to carry as .cache
# in the landing's calls), the new GPU tests, the fused stage's bf16 forward kernels against cuBLAS
# at the presets (run233-time.py), the rest of the GPU tests of tests/test_mixed_precision.py and
# test_gpu_operator.py, then 39's train step in tf32 and bf16 (naive, fused, eager: the backward's
# time beside eager's, against results/<gpu>/train_step.csv) and its kernels (run233-bwd.py). NAME=run235 names a rerun's files.
# Returns $NAME.log, $NAME-out.tgz (the tests' output, the CSVs), flcache.part-*. About 8 minutes:
# give it 590 s.
NAME=${NAME:-run233}; LOG=$NAME.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
mkdir -p /tmp/$NAME; O=/tmp/$NAME
timeout 240 python -m pytest -m gpu -q -x tests/test_mixed_precision.py -k "sixteen_bit_z or reads_a_sixteen" \
  > $O/new-tests.out 2>&1
say "new tests: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 6 $O/new-tests.out | tee -a $OUT/$LOG
OUT=$O timeout 90 python lab/experiments/run233-time.py > $O/time.out 2>&1
say "timing: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 12 $O/time.out | tee -a $OUT/$LOG
left=$(( 470 - ($(date +%s) - t0) ))
timeout $left python -m pytest -m gpu -q tests/test_mixed_precision.py tests/test_gpu_operator.py \
  > $O/mixed.out 2>&1
say "test_mixed_precision + test_gpu_operator (GPU, ${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"
grep -h "^FAILED\|passed\|failed" $O/mixed.out | tail -n 12 | tee -a $OUT/$LOG
left=$(( 510 - ($(date +%s) - t0) ))
timeout $left python -m fusedlib train-step --problem 39 --precision tf32,bf16 --impl naive,fused,eager \
  --out $O/train39.csv --fresh > $O/train39.out 2>&1
say "train step 39 (${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"; grep " step " $O/train39.out | tee -a $OUT/$LOG
OUT=$O timeout 60 python lab/experiments/run233-bwd.py > $O/bwd.out 2>&1
say "39's train-step kernels: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -i "backward\|precision" $O/bwd.out | cut -c1-160 | tee -a $OUT/$LOG
tar czf $OUT/$NAME-out.tgz -C /tmp $NAME
