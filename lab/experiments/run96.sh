#!/usr/bin/env bash
# run96 (H100): build every extension, the operator tests (the eager way included), then the host times (run96-host.py).
set -u
L=$PWD/results/h100/logs
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && (cat /tmp/build-*.log | grep -i -B2 -A8 "error" | head -60)
timeout 240 python -m pytest -q -m gpu -x tests/test_gpu_operator.py -p no:cacheprovider 2>&1 | tail -15
echo "operator tests done ($(( $(date +%s) - t0 )) s)"
timeout 200 python $L/run96-host.py 2>&1 | grep -v -i warn | tee $OUT/host.log | tail -40
