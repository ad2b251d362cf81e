#!/usr/bin/env bash
# run214 (one H200 or H100; issue 36's item 5): Z′ in the module's dtype (run214-z16.py: a copy of the
# kernels whose fused stage stores Z′ in the 16-bit dtype and whose row pass reads it; forward only).
# Builds the package's fused stage (from a carried cache) and the copy's, then times both and checks
# the copy's bits (Z′ unchanged: as the package's) and its error (Z′ 16-bit: against 2 × eager's).
# Returns run214.log, run214-z16.csv and run214-kernelbench.csv. About 5 minutes.
LOG=run214.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run214-z16.py copy
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-fused.log 2>&1 &
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run214-z16'))" \
  > /tmp/build-z16.log 2>&1
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/run214.log
timeout 300 python lab/experiments/run214-z16.py > /tmp/run214.out 2>&1
say "run214-z16: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 24 /tmp/run214.out | tee -a $OUT/run214.log
