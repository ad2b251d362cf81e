#!/usr/bin/env bash
# run229 (one H200 or H100; issue 36): run229-z16q.py's copy (run227's with Z′ in bf16 stored 16 bytes
# at a time) built, then run229-z16q.py. Returns run229.log and run229-*.csv. About 4.5 minutes.
LOG=run229.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run229-z16q.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run229-z16q'))" \
  > /tmp/build-copy.log 2>&1
say "copy built ($(( $(date +%s) - t0 )) s)"; grep -i -A5 "error" /tmp/build-copy.log | head -30 | tee -a $OUT/$LOG
timeout ${RUN_TIMEOUT:-240} python lab/experiments/run229-z16q.py > $OUT/run229-z16q.out 2>&1
say "run229-z16q: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 45 $OUT/run229-z16q.out | tee -a $OUT/$LOG
