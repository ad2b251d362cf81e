#!/usr/bin/env bash
# run231 (one H200 or H100; issue 36): run231-cluster.py's standalone bf16 GEMM (run231_cluster.patch:
# the engine's mainloop with and without a 2-CTA cluster multicasting W's tile) built, then its
# checks and timings against cuBLAS and the package's sums stage. Returns run231.log, run231-*.csv.
# About 3 minutes.
LOG=run231.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run231-cluster.py build > $OUT/run231-build.out 2>&1
rc=$?; say "kernel built: rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -i -B2 -A8 "error" $OUT/run231-build.out | head -40 | tee -a $OUT/$LOG
[ $rc -eq 0 ] || exit 1
timeout 60 python lab/experiments/run231-cluster.py checks > $OUT/run231-checks.out 2>&1
rc=$?; say "checks: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 4 $OUT/run231-checks.out | tee -a $OUT/$LOG
[ $rc -eq 0 ] || exit 1
timeout ${RUN_TIMEOUT:-300} python lab/experiments/run231-cluster.py > $OUT/run231-cluster.out 2>&1
say "run231-cluster: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 40 $OUT/run231-cluster.out | tee -a $OUT/$LOG
