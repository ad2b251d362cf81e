#!/usr/bin/env bash
# run232 (one H200 or H100; issue 36): run232-ztma.py's copy of the kernels (run214's 16-bit Z′ with
# a TMA epilogue behind $FUSEDLIB_ZTMA) built, a smoke test on small shapes, then the presets.
# Returns run232.log, run232-*.csv. About 6 minutes (the copy's build 130-220 s): give the call 480 s.
LOG=run232.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run232-ztma.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run232-ztma'))" \
  > /tmp/build-copy.log 2>&1
say "copy built ($(( $(date +%s) - t0 )) s)"; grep -i -A5 "error" /tmp/build-copy.log | head -30 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run232-ztma.py smoke > $OUT/run232-smoke.out 2>&1
rc=$?; say "smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 10 $OUT/run232-smoke.out | tee -a $OUT/$LOG
[ $rc -eq 0 ] || exit 1
timeout ${RUN_TIMEOUT:-300} python lab/experiments/run232-ztma.py > $OUT/run232-ztma.out 2>&1
say "run232-ztma: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 30 $OUT/run232-ztma.out | tee -a $OUT/$LOG
