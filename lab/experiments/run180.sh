#!/usr/bin/env bash
# run180 (one H200): the 16-bit eager call (run180's patch, merged since run182; run181's patch, applied, is checked the same way):
# a bf16/fp16 module's vectors cast to float32 in the C++ eager call (one cat, one cast) instead of
# six casts in Python before the GEMM's launch, and the all-gather into one tensor shaped (R·4, M),
# which gloo takes (run179 PART=sync1: "ProcessGroupGloo::allgather: invalid tensor size").
#   PART=a  build; the mixed part of the GPU suite (with the new bit-for-bit test of the eager call
#           against the operator's route), KernelBench's check, then run180-host16.py (A/B: the module
#           as patched against the float32-vector bound and the peers)
#   PART=s  the data-parallel GPU cases over gloo on this one GPU (run179.sh PART=sync1)
#   PART=b  build; the eager call's bit-for-bit test; run180-host16.py; then PART=s's cases (SYNC_TIMEOUT=240)
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
ls .cache/flcache.part-* > /dev/null 2>&1 && cat .cache/flcache.part-* | tar xzf -
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > $OUT/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" $OUT/build-*.log && tail -30 $OUT/build-*.log
if [ "${PART:-a}" = b ]; then
  timeout 120 python -m pytest -q -m gpu tests/test_mixed_precision.py -k eager_call -p no:cacheprovider > $OUT/eager.log 2>&1
  echo "eager call: $(tail -n 1 $OUT/eager.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E  " $OUT/eager.log | head -6
  python lab/experiments/run180-host16.py 2>&1 | grep -v Warning | tee $OUT/host16.log | tail -26
  PART=s
fi
if [ "${PART:-a}" = a ]; then
  timeout 240 python -m pytest -q -m gpu tests/test_mixed_precision.py tests/test_kernelbench_eval.py -p no:cacheprovider \
    > $OUT/mixed.log 2>&1
  echo "mixed + kernelbench: $(tail -n 1 $OUT/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^E  " $OUT/mixed.log | head -12
  python lab/experiments/run180-host16.py 2>&1 | grep -v Warning | tee $OUT/host16.log | tail -26
else
  FUSEDLIB_SYNC_BACKEND=gloo FUSEDLIB_SYNC_VALIDATION_OUT=$OUT/sync_validation.json timeout ${SYNC_TIMEOUT:-420} \
    python -m pytest -q -m gpu tests/test_sync_gpu.py -p no:cacheprovider -s > $OUT/sync1.log 2>&1
  echo "sync over gloo: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "world size\|passed\|failed\|^E  " $OUT/sync1.log | head -30
fi
