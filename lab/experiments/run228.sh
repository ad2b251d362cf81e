#!/usr/bin/env bash
# run228 (one H200 or H100; issue 36): run228-pingpong.py's copy of the kernels (the ping-pong
# schedule, run228_pingpong.patch) built, then run228-pingpong.py (bits, errors, kernels and forwards
# against the package's cooperative GEMM and cuBLAS). Returns run228.log, run228-*.csv. About 5 minutes.
LOG=run228.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run228-pingpong.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('sums', 0, Path('build/run228-pingpong'))" \
  > /tmp/build-copy.log 2>&1
say "copy built ($(( $(date +%s) - t0 )) s)"; grep -i -A5 "error" /tmp/build-copy.log | head -30 | tee -a $OUT/$LOG
timeout 90 python lab/experiments/run228-pingpong.py smoke > $OUT/run228-smoke.out 2>&1
rc=$?; say "smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 14 $OUT/run228-smoke.out | tee -a $OUT/$LOG
[ $rc -eq 0 ] || exit 1
timeout ${RUN_TIMEOUT:-300} python lab/experiments/run228-pingpong.py > $OUT/run228-pingpong.out 2>&1
say "run228-pingpong: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 60 $OUT/run228-pingpong.out | tee -a $OUT/$LOG
