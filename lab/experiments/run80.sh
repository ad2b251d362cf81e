#!/usr/bin/env bash
# run80 (H100): branch `next` — the 3xTF32 tile width per shape and the wgmma epilogue from the
# accumulator registers: build, wgmma forward cases (84/33 at 257×1000→999 and K = 16384, 39's
# KernelBench shape in sums/fused, the reruns), then GEMM kernel times against main's kernels
# (.cache/old) with run72-time.py (84, round-robin) and run79-time.py (3xTF32, five shapes).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-new-$s.log 2>&1 &
done
for s in naive sums fused; do
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oldcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -20 /tmp/b-*.log
T="python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider"
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json timeout 240 $T \
  -k "case_matches and ((257x1000 and tf32) or (256x16384 and wgmma) or (v0 and tf32 and wgmma))" > $OUT/tests1.log 2>&1 &
FUSEDLIB_GPU_PROBLEMS=39 FUSEDLIB_VALIDATION_OUT=/tmp/v2.json timeout 240 $T \
  -k "(case_matches and 16384x4096 and 3xtf32 and (sums or fused)) or (reruns_are_bit_identical and tf32)" > $OUT/tests2.log 2>&1 &
wait
for i in 1 2; do echo "tests$i: $(tail -1 $OUT/tests$i.log)"; grep -E "^FAILED|Error" $OUT/tests$i.log | head -8; done
echo "($(( $(date +%s) - t0 )) s)"
L=$PWD/results/h100/logs
timeout 60 python $L/run72-time.py next 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oldcache timeout 60 python $L/run72-time.py main) 2>&1 | grep -v -i warn
timeout 60 python $L/run79-time.py next 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oldcache timeout 60 python $L/run79-time.py main) 2>&1 | grep -v -i warn
echo "done ($(( $(date +%s) - t0 )) s)"
