#!/usr/bin/env bash
# run104 (H100): the merge in groups of 16 row tiles: fused against sums in one process
# (run101-ab.py, no B variant), the operator tests (the sums/fused bit-identity test among
# them), then the GPU suite (validation only). The device time ran out during the operator
# tests: only the A/B came back (run104-ab.log). The tree was 5f24182, reverted after.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && (grep -i -B2 -A10 error /tmp/build-*.log | head -60)
timeout 120 python $L/run101-ab.py time 2>&1 | grep -v -i warn | tee $OUT/ab.log
timeout 150 python -m pytest -q -m gpu -x tests/test_gpu_operator.py -p no:cacheprovider 2>&1 | tail -5
echo "operator tests done ($(( $(date +%s) - t0 )) s)"
timeout 330 python tests/run_gpu_suite.py --out build/gpu-suite 2>&1 | tee $OUT/suite.log
tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log
echo "done ($(( $(date +%s) - t0 )) s)"
