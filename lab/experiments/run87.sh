#!/usr/bin/env bash
# run87 (H100): split-K in the wgmma GEMM (branch `next`): build; wgmma forward cases of 84/33
# (small shapes split on their own; forced 3 and 2 splits), the persistent grid test, reruns,
# the sanitizer; then the forward's kernel time at v0 and 84 against main (.cache/old).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p /tmp/oc && tar -xzf .cache/flcache.tgz -C /tmp/oc
for s in naive fold sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-A-$s.log 2>&1 &
done
PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/b-bwd.log 2>&1 &
for s in sums fused; do
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oc/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -30 /tmp/b-*.log
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
T="timeout 300 python -m pytest -m gpu -q -p no:cacheprovider"
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json $T tests/test_gpu.py \
  -k "case_matches and (tf32) and (v0 or 257x1000 or splitk or 1024x8192)" > $OUT/tests1.log 2>&1 &
FUSEDLIB_GPU_PROBLEMS=84 FUSEDLIB_VALIDATION_OUT=/tmp/v2.json $T tests/test_gpu.py \
  -k "persistent_grid or (reruns_are_bit_identical and tf32) or sanitizer" > $OUT/tests2.log 2>&1 &
wait
for i in 1 2; do echo "tests$i: $(tail -n 1 $OUT/tests$i.log)"; grep -E "^FAILED|Error" $OUT/tests$i.log | head -8; done
echo "($(( $(date +%s) - t0 )) s)"
L=$PWD/results/h100/logs
timeout 100 python $L/run87-time.py next 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oc/build/flcache timeout 100 python $L/run87-time.py main) 2>&1 | grep -v -i warn
echo "done ($(( $(date +%s) - t0 )) s)"
