#!/usr/bin/env bash
# run88 (H100): split-K, second version (the S = 1 kernels compiled without the split
# bookkeeping; the last split adds the partial tiles split by split; at most 8 splits): build
# sums and fused; their v0 and forced-split cases; the forward's kernel time (run87-time.py)
# against main's kernels (.cache/flcache.tgz holds their build).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p /tmp/oc && tar -xzf .cache/flcache.tgz -C /tmp/oc
for s in sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-A-$s.log 2>&1 &
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oc/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -30 /tmp/b-*.log
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "case_matches and tf32 and (sums or fused) and (v0 or splitk)" > $OUT/tests1.log 2>&1
echo "tests1: $(tail -n 1 $OUT/tests1.log)"; grep -E "^FAILED|Error" $OUT/tests1.log | head -8
echo "($(( $(date +%s) - t0 )) s)"
L=$PWD/results/h100/logs
timeout 100 python $L/run87-time.py next 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oc/build/flcache timeout 100 python $L/run87-time.py main) 2>&1 | grep -v -i warn
echo "done ($(( $(date +%s) - t0 )) s)"
