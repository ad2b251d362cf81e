#!/usr/bin/env bash
# run81 (H100, prepared): branch `next` before merging — the register epilogue, the 3xTF32 width
# per shape, the persistent wgmma GEMM and the one-launch tf32 fused forward: build; the wgmma
# forward cases, the grid bit-identity test (1, 7, 132 CTAs: phase 2 included), reruns,
# operator tests (CUDA graphs of the cooperative launch); then GEMM/forward times against
# main (.cache/old) — persistent vs one CTA a tile (FUSEDLIB_WGMMA_GRID=100000), one launch vs
# two (FUSEDLIB_ONE_LAUNCH=0) — with run72-time.py and run70-time.py.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-new-$s.log 2>&1 &
done
PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/b-bwd.log 2>&1 &
for s in naive sums fused; do
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oldcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -20 /tmp/b-*.log
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
T="timeout 240 python -m pytest -m gpu -q -p no:cacheprovider"
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json $T tests/test_gpu.py \
  -k "persistent_grid or (case_matches and ((257x1000 and tf32) or (256x16384 and wgmma) or (v0 and tf32)))" > $OUT/tests1.log 2>&1 &
FUSEDLIB_GPU_PROBLEMS=39 FUSEDLIB_VALIDATION_OUT=/tmp/v2.json $T tests/test_gpu.py \
  -k "(case_matches and 16384x4096 and tf32 and (sums or fused)) or (reruns_are_bit_identical and tf32)" > $OUT/tests2.log 2>&1 &
$T tests/test_gpu_operator.py -k "graph or compile or stream or opcheck_cuda" > $OUT/tests3.log 2>&1 &
wait
for i in 1 2 3; do echo "tests$i: $(tail -n 1 $OUT/tests$i.log)"; grep -E "^FAILED|Error" $OUT/tests$i.log | head -8; done
echo "($(( $(date +%s) - t0 )) s)"
L=$PWD/results/h100/logs
timeout 60 python $L/run72-time.py next 2>&1 | grep -v -i warn
FUSEDLIB_WGMMA_GRID=100000 timeout 60 python $L/run72-time.py next-1tile 2>&1 | grep -v -i warn
(cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oldcache timeout 60 python $L/run72-time.py main) 2>&1 | grep -v -i warn
timeout 90 python $L/run70-time.py next 2>&1 | grep -v -i warn
FUSEDLIB_ONE_LAUNCH=0 timeout 90 python $L/run70-time.py next-2launch 2>&1 | grep -v -i warn
echo "done ($(( $(date +%s) - t0 )) s)"
