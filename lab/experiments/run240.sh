#!/usr/bin/env bash
# run240 (one H200 or H100; issue 36): run238 and run239 in one call, their two copies of the
# kernels built side by side (carry .cache: the package's stages come from it), then each
# experiment in turn under its own timeout: run238 (the tile count handed to warp 1: smoke, then
# the presets), run239 (33/39's affine row pass by rows: smoke, then the presets). (Its first run
# also ran run211, 84's row pass pipelined: the package's row pass stayed ahead, 19.5 against
# 23.8 µs at best, and run211 left it.) Returns run240.log, run238-out.tgz, run239-affine.csv.
# About 9 minutes: give it 590 s.
LOG=run240.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
mkdir -p /tmp/run238
python lab/experiments/run238-count.py copy
python lab/experiments/run239-affine.py copy
python -c "from fusedlib.build import load_stage; load_stage('fused'); load_stage('sums')" > /tmp/build-pkg.log 2>&1 &
for c in run238-count run239-affine; do
  python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/$c'))" \
    > /tmp/build-$c.log 2>&1 &
done
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run238-count.py smoke > /tmp/run238/smoke.out 2>&1
rc=$?; say "run238 smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 8 /tmp/run238/smoke.out | cut -c1-200 | tee -a $OUT/$LOG
if [ $rc -eq 0 ]; then
  OUT=/tmp/run238 timeout 260 python lab/experiments/run238-count.py > /tmp/run238/main.out 2>&1
  say "run238 presets: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{" /tmp/run238/main.out | tail -n 40 | cut -c1-220 | tee -a $OUT/$LOG
fi
tar czf $OUT/run238-out.tgz -C /tmp run238
timeout 60 python lab/experiments/run239-affine.py smoke > /tmp/run239-smoke.out 2>&1
rc=$?; say "run239 smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 4 /tmp/run239-smoke.out | cut -c1-200 | tee -a $OUT/$LOG
if [ $rc -eq 0 ]; then
  timeout $(( 580 - ($(date +%s) - t0) )) python lab/experiments/run239-affine.py > /tmp/run239.out 2>&1
  say "run239: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{" /tmp/run239.out | tail -n 24 | tee -a $OUT/$LOG
fi
