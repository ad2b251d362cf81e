#!/usr/bin/env bash
# run164 (one H100): the combined kernels (the shift row from a pointer, issue 35; the bf16/fp16
# wgmma route, issue 36) built once, then
#   * run162: the fp32 fused backward's d scale at offset 1000 on one GPU at 5724 rows (is one GPU
#     as far off as the data-parallel step, 3.35e-05?)
#   * the 16-bit route's GPU tests (tests/test_mixed_precision.py, marked gpu) and the operator's
#     opcheck on 16-bit operands
#   * run161: the route against float64, and its speed at the KernelBench shapes
# Returns the build cache in parts (flcache.part-*: copy into .cache/ for later calls).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
ls .cache/flcache.part-* > /dev/null 2>&1 && cat .cache/flcache.part-* | tar xzf -
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && cat /tmp/build-*.log | tail -30
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
mkdir -p /tmp/logs
timeout 90 python lab/experiments/run162-dscale.py > /tmp/logs/run162.log 2>&1
echo "run162: rc=$? ($(( $(date +%s) - t0 )) s)"; cat /tmp/logs/run162.log | tail -10
timeout 300 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider > /tmp/logs/mixed.log 2>&1
echo "mixed: $(tail -n 1 /tmp/logs/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|Error" /tmp/logs/mixed.log | head -12
OUT=/tmp/logs timeout 150 python lab/experiments/run161-bf16-engine.py > /tmp/logs/run161.out 2>&1
echo "run161: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 30 /tmp/logs/run161.out
tar czf $OUT/logs.tgz -C /tmp logs
