#!/usr/bin/env bash
# run70 (H100): the persistent wgmma GEMM (chunked epilogue, 3xTF32 on 128×168 tiles): build,
# the grid-size and rerun bit-identity tests, forward cases on the wgmma path and the forced
# SIMT 128×64 tile, then kernel times beside the previous kernels (.cache/old, commit cbbe55d)
# and cuBLAS (run70-time.py).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
(cd .cache/old && FUSEDLIB_CACHE=/tmp/oldcache PYTHONPATH=$PWD/.cache/old python -c "from fusedlib.build import load_stage; load_stage('fused')" > /tmp/build-old.log 2>&1) &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log
tar czf $OUT/flcache.tgz build/flcache
T="python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider"
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v1.json timeout 300 $T \
  -k "persistent_grid or (case_matches and simt-128x64)" > $OUT/tests1.log 2>&1 &
FUSEDLIB_GPU_PROBLEMS=84,33 FUSEDLIB_VALIDATION_OUT=/tmp/v2.json timeout 300 $T \
  -k "case_matches and ((257x1000 and tf32) or (256x16384 and wgmma))" > $OUT/tests2.log 2>&1 &
wait
for i in 1 2; do echo "tests$i: $(tail -1 $OUT/tests$i.log)"; grep -E "^FAILED|Error" $OUT/tests$i.log | head -10; done
echo "($(( $(date +%s) - t0 )) s)"
timeout 120 python lab/experiments/run70-time.py new 2>&1 | tee $OUT/time.log
(cd .cache/old && FUSEDLIB_CACHE=/tmp/oldcache PYTHONPATH=$PWD timeout 120 python $OLDPWD/lab/experiments/run70-time.py old) 2>&1 | tee -a $OUT/time.log
echo "done ($(( $(date +%s) - t0 )) s)"
