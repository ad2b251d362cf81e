#!/usr/bin/env bash
# run244 (one H200 or H100; issue 36): where the fused GEMM's time over the sums GEMM goes
# (run244-units.py): its copy of the kernels built beside the package's fused and sums stages
# (carry .cache: those come from it), a smoke test of the modes' bits, then the presets; then
# run245-steptrace.py (the short train steps' kernels against their span: the GPU's idle time).
# Returns run244.log, run244-out.tgz. About 6 minutes: give it 460 s.
LOG=run244.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
mkdir -p /tmp/run244
python lab/experiments/run244-units.py copy
python -c "from fusedlib.build import load_stage; load_stage('fused'); load_stage('sums')" > /tmp/build-pkg.log 2>&1 &
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run244-units'))" \
  > /tmp/build-run244.log 2>&1 &
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/$LOG
timeout 120 python lab/experiments/run244-units.py smoke > /tmp/run244/smoke.out 2>&1
rc=$?; say "run244 smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -v "Warning\|registered\|Overriding\|operator:\|dispatch key\|kernel:" /tmp/run244/smoke.out | tail -n 8 | cut -c1-220 | tee -a $OUT/$LOG
if [ $rc -eq 0 ]; then
  OUT=/tmp/run244 timeout $(( 350 - ($(date +%s) - t0) )) python lab/experiments/run244-units.py > /tmp/run244/main.out 2>&1
  say "run244 presets: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{" /tmp/run244/main.out | tail -n 30 | cut -c1-240 | tee -a $OUT/$LOG
fi
OUT=/tmp/run244 timeout $(( 450 - ($(date +%s) - t0) )) python lab/experiments/run245-steptrace.py > /tmp/run244/run245.out 2>&1
say "run245: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{\|USDT\|Warning\|warn" /tmp/run244/run245.out | tail -n 30 | cut -c1-200 | tee -a $OUT/$LOG
tar czf $OUT/run244-out.tgz -C /tmp run244
