#!/usr/bin/env bash
# run153 (2 or 4 H100s): data parallelism in the CUDA kernels (the forward in two phases around
# one all-gather, torch_op.cuh sync_forward): build, a CUDA check of every stage on the changed
# kernels (one process), the NCCL cases (tests/test_sync_gpu.py), the notebook 02 GPU exercise.
#   PART=check (default)   all of the above
#   PART=debug             one NCCL case at a time (run153-debug.py), then the exercise
#   PART=sync              tests/test_sync_gpu.py alone (SYNC_K: a -k filter), recorded into
#                          results/<gpu>/sync_validation.json (copied to $OUT)
#   PART=bench             python -m fusedlib sync-bench --world $WORLDS (default 1,2,4) --fresh
#   PART=routes            the direct routes below the dispatcher on one GPU (tests/test_gpu_operator.py:
#                          the backward's route against the operator, CUDA graphs, opcheck), then
#                          lab/experiments/run156-hostprof.py (2 GPUs: the host's time piece by piece)
#   PART=multi             sync, routes, then bench (a 4-GPU machine: world sizes 2 and 4 in one call)
#   PART=records           sync, then bench (WORLDS), the two records alone (no routes)
set -u
for a in "$@"; do  # NAME=value arguments, taken as the environment's (run153.sh PART=records WORLDS=1,2)
  case $a in *=*) export "$a" ;; *) echo "run153.sh: expected NAME=value arguments, got '$a'" >&2; exit 2 ;; esac
done
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
. lab/experiments/restore_cache.sh  # a carried .cache (build cache parts), if any
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"
if grep -il "error" /tmp/build-*.log; then grep -h -B2 -A12 "error" /tmp/build-*.log | head -60; exit 1; fi
case ${PART:-check} in
  multi) SYNC_TIMEOUT=${SYNC_TIMEOUT:-300} PART=sync bash $0 && PART=routes bash $0 && PART=bench bash $0; exit ;;
  records) PART=sync bash $0 && PART=bench bash $0; exit ;;
  routes)
    timeout 150 python -m pytest -q -m gpu tests/test_gpu_operator.py -p no:cacheprovider \
      -k "direct_route or opcheck_train_backward or cuda_graph or sgd_steps" > $OUT/routes.log 2>&1
    echo "routes: $(tail -n 1 $OUT/routes.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^E  \|^FAILED" $OUT/routes.log | head -20
    timeout 120 python lab/experiments/run156-hostprof.py > /tmp/hostprof.log 2>&1
    echo "hostprof: rc=$? ($(( $(date +%s) - t0 )) s)"; grep " us" /tmp/hostprof.log | grep -v cProfile | head -24 ;;
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
    slug=$(python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
    rm -f results/$slug/sync_validation.json
    FUSEDLIB_SYNC_VALIDATION_OUT=results/$slug/sync_validation.json timeout ${SYNC_TIMEOUT:-235} \
      python -m pytest -q -x -m gpu tests/test_sync_gpu.py -p no:cacheprovider -s ${SYNC_K:-} > $OUT/sync.log 2>&1
    echo "sync: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "world size\|passed\|failed\|^E  " $OUT/sync.log | head -40
    cp results/$slug/sync_validation.json $OUT/ 2>/dev/null ;;
  bench)
    timeout ${BENCH_TIMEOUT:-540} python -m fusedlib sync-bench --world ${WORLDS:-1,2,4} --fresh > $OUT/sync-bench.log 2>&1
    echo "sync-bench: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 30 $OUT/sync-bench.log
    cp results/*/sync.csv results/*/sync.sources.json $OUT/ 2>/dev/null ;;
esac
