#!/usr/bin/env bash
# run211 (one H200 or H100; issue 36; prepared, on branch ztma's kernels: Z' in bf16): run211-rows.py's copy of the kernels (the pipelined
# row pass of 84's fused stage) written and its fused stage built, then run211-rows.py (the row
# kernel's bits and time, package against the variants, bf16 and tf32). Returns run211.log and
# run211-rows.csv. About 3 minutes.
LOG=run211.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run211-rows.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run211-rows'))" \
  > /tmp/build-rows.log 2>&1
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-rows.log | head -20 | tee -a $OUT/run211.log
timeout 240 python lab/experiments/run211-rows.py > /tmp/run211.out 2>&1
say "run211-rows: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 20 /tmp/run211.out | tee -a $OUT/run211.log
