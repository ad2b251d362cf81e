#!/usr/bin/env bash
# run238 (one H200 or H100; issue 36): run238-count.py's copy of the kernels (the persistent GEMM's
# tile count handed to the producer warpgroup's warp 1, or with no fence as a bound) written and its
# fused stage built (carry .cache: the package's stages come from it), a smoke test on small shapes
# (bits of every mode against the package's; a hang ends at the timeout), then the presets: bits,
# the forward's kernels and the whole forwards at 39, 84 and 33 in bf16 and tf32. Returns run238.log
# and run238-out.tgz (run238-checks.csv, -kernels.csv, -rounds.csv). About 6 minutes: give it 480 s.
LOG=run238.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
mkdir -p /tmp/run238; O=/tmp/run238
python lab/experiments/run238-count.py copy
python -c "from fusedlib.build import load_stage; load_stage('fused'); load_stage('sums')" > /tmp/build-pkg.log 2>&1 &
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run238-count'))" \
  > /tmp/build-count.log 2>&1
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run238-count.py smoke > $O/smoke.out 2>&1
rc=$?; say "smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 8 $O/smoke.out | cut -c1-200 | tee -a $OUT/$LOG
if [ $rc -eq 0 ]; then
  OUT=$O timeout $(( 460 - ($(date +%s) - t0) )) python lab/experiments/run238-count.py > $O/main.out 2>&1
  say "presets: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{" $O/main.out | tail -n 40 | cut -c1-220 | tee -a $OUT/$LOG
fi
tar czf $OUT/run238-out.tgz -C /tmp run238
