#!/usr/bin/env bash
# run239 (one H200 or H100; issue 36): run239-affine.py's copy of the kernels (33/39's affine row pass
# by rows, a and c in registers) written and its fused stage built (carry .cache: the package's stage
# comes from it), a smoke test of the bits on small and odd shapes, then the row pass's time at 39's
# and 33's KernelBench shapes in bf16, fp16 and tf32, the package's kernel against R = 1, 2, 4, 8 rows
# at a time, beside the DRAM floor. Returns run239.log and run239-affine.csv. About 4 minutes.
LOG=run239.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run239-affine.py copy
python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-pkg.log 2>&1 &
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run239-affine'))" \
  > /tmp/build-affine.log 2>&1
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -i "error" /tmp/build-*.log | head -20 | tee -a $OUT/$LOG
timeout 90 python lab/experiments/run239-affine.py smoke > /tmp/run239-smoke.out 2>&1
rc=$?; say "smoke: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 6 /tmp/run239-smoke.out | cut -c1-200 | tee -a $OUT/$LOG
if [ $rc -eq 0 ]; then
  timeout 180 python lab/experiments/run239-affine.py > /tmp/run239.out 2>&1
  say "run239-affine: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^{" /tmp/run239.out | tail -n 24 | tee -a $OUT/$LOG
fi
