#!/usr/bin/env bash
# run153 (2 or 4 H100s): data parallelism in the CUDA kernels (the forward in two phases around
# one all-gather, torch_op.cuh sync_forward): build, a CUDA check of every stage on the changed
# kernels (one process), the NCCL cases (tests/test_sync_gpu.py), the notebook 02 GPU exercise.
#   PART=check (default)   all of the above
#   PART=bench             the DDP step timings (lab/experiments/run153-sync-bench.py)
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"
if grep -il "error" /tmp/build-*.log; then grep -h -B2 -A12 "error" /tmp/build-*.log | head -60; exit 1; fi
case ${PART:-check} in
  check)
    timeout 200 python -m fusedlib check --device cuda --problem 84,33 --stage all --mode all --precision all \
      --shape 257x192:320 --shape 1000x132:97 --inputs randn,offset --seeds 2 > $OUT/check.log 2>&1
    echo "check: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/check.log
    timeout 330 python -m pytest -q -m gpu tests/test_sync_gpu.py -x -s -p no:cacheprovider > $OUT/sync.log 2>&1
    echo "sync: $(tail -n 1 $OUT/sync.log) ($(( $(date +%s) - t0 )) s)"; grep -h "world size\|^E  \|Error" $OUT/sync.log | head -40
    timeout 120 python -m pytest -q -m gpu tests/test_exercises.py -p no:cacheprovider > $OUT/exercises.log 2>&1
    echo "exercises: $(tail -n 1 $OUT/exercises.log) ($(( $(date +%s) - t0 )) s)" ;;
  debug)
    timeout 200 python lab/experiments/run153-debug.py > $OUT/debug.log 2>&1; echo "debug rc=$?"; tail -c 5000 $OUT/debug.log
    timeout 150 python -m pytest -q -x -m gpu tests/test_exercises.py -p no:cacheprovider > $OUT/exercises.log 2>&1
    echo "exercises: $(tail -n 1 $OUT/exercises.log)"; grep -h "^E  " $OUT/exercises.log | head -30 ;;
  sync)
    timeout ${SYNC_TIMEOUT:-235} python -m pytest -q -x -m gpu tests/test_sync_gpu.py -p no:cacheprovider -s ${SYNC_K:-} > $OUT/sync.log 2>&1
    echo "sync: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "world size\|passed\|failed\|^E  " $OUT/sync.log | head -40 ;;
  bench)
    timeout 500 python lab/experiments/run153-sync-bench.py --out $OUT 2>&1 | tail -30 ;;
esac
