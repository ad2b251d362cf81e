#!/usr/bin/env bash
# run230 (prepared; one H200 or H100; issue 36): run230-offload.py's copy of the kernels (the 16-bit
# GEMM's epilogue offloaded to the producer's idle warps, run230_offload.patch) built, a smoke test on
# small shapes, then run230-offload.py (errors, kernels and forwards against the package's fused and
# sums stages and cuBLAS). Returns run230.log, run230-*.csv. About 7 minutes (the copy's build 130-220 s): give the call 540 s.
LOG=run230.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run230-offload.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run230-offload'))" \
  > /tmp/build-copy.log 2>&1
say "copy built ($(( $(date +%s) - t0 )) s)"; grep -i -A5 "error" /tmp/build-copy.log | head -30 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run230-offload.py smoke > $OUT/run230-smoke.out 2>&1
rc=$?; say "smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 14 $OUT/run230-smoke.out | tee -a $OUT/$LOG
[ $rc -eq 0 ] || exit 1
timeout ${RUN_TIMEOUT:-360} python lab/experiments/run230-offload.py > $OUT/run230-offload.out 2>&1
say "run230-offload: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 50 $OUT/run230-offload.out | tee -a $OUT/$LOG
