#!/usr/bin/env bash
# run82 (H100): branch `next` with the one-launch forward reverted (run81: slower) and 84's row
# softmax in registers. Checks: 84's fused cases (new shapes M = 4000, 6148 included), reruns;
# then GEMM times (run72-time) of this tree (A), of A with 3xTF32 one CTA a tile (B, .cache/varB)
# and of main (.cache/old), and the fused forward's kernels (run70-time) of A and main.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p /tmp/oc && tar -xzf .cache/flcache.tgz -C /tmp/oc
for s in naive fold sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-A-$s.log 2>&1 &
done
for s in naive sums fused; do
  (cd .cache/varB && PYTHONPATH=$PWD/.cache/varB FUSEDLIB_CACHE=/tmp/bcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-B-$s.log 2>&1) &
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oc/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -20 /tmp/b-*.log
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
FUSEDLIB_GPU_PROBLEMS=84 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "(case_matches and fused) or (reruns_are_bit_identical and fused)" > $OUT/tests1.log 2>&1
echo "tests1: $(tail -n 1 $OUT/tests1.log)"; grep -E "^FAILED|Error" $OUT/tests1.log | head -8
echo "($(( $(date +%s) - t0 )) s)"
L=$PWD/results/h100/logs
timeout 60 python $L/run72-time.py A 2>&1 | grep -v -i warn
(cd .cache/varB && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/bcache timeout 60 python $L/run72-time.py B-3x1tile) 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oc/build/flcache timeout 60 python $L/run72-time.py main) 2>&1 | grep -v -i warn
timeout 60 python $L/run72-time.py A 2>&1 | grep -v -i warn
(cd .cache/varB && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/bcache timeout 60 python $L/run72-time.py B-3x1tile) 2>&1 | grep -v -i warn
timeout 90 python $L/run70-time.py A 2>&1 | grep -v -i warn
(cd .cache/varB && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/bcache timeout 90 python $L/run70-time.py B-3x1tile) 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oc/build/flcache timeout 90 python $L/run70-time.py main) 2>&1 | grep -v -i warn
echo "done ($(( $(date +%s) - t0 )) s)"
