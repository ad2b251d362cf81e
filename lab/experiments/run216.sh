#!/usr/bin/env bash
# run216 (one H200 or H100; issue 36; on branch fence-first, its build cache carried as .cache):
# run214, run215 and run211 in one call, their two copies built side by side with the stages:
#   run214-z16.py       Z′ in the module's dtype: time, bits, error; KernelBench's bf16 check
#   run215-autocast.py  the autocast-bf16 train step's kernels at 33 and 84
#   run211-rows.py      84's row pass pipelined over rows: bits and time
# Returns run216.log, the three scripts' logs and their CSVs (7 files). About 8 minutes.
LOG=run216.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run214-z16.py copy
python lab/experiments/run211-rows.py copy
for c in run214-z16 run211-rows; do
  python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/$c'))" \
    > /tmp/build-$c.log 2>&1 &
done
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log | tee -a $OUT/$LOG
run() {  # name, timeout (s): one script, its whole log back, its last lines here
  timeout $2 python lab/experiments/$1.py > $OUT/$1.log 2>&1
  say "$1: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n ${3:-20} $OUT/$1.log | tee -a $OUT/$LOG
}
run run214-z16 240 24
run run215-autocast 150 30
run run211-rows 120 16
