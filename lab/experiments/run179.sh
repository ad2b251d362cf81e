#!/usr/bin/env bash
# run179: the refresh of every GPU result on the kernels of the 16-bit route (run178's patch,
# merged), on whichever GPU the call gets (results/<gpu>/ by fusedlib.lab.records.gpu_slug).
# The parts of run151.sh, in calls of at most 10 minutes:
#   PART=large     build (the build cache back in parts, flcache.part-*: copy them into .cache/ and
#                  carry .cache, with large.json as .cache/gpu-suite/large.json), the large part
#   PART=suite     every other part of the GPU suite; validation.json back (with the large part's
#                  file of an earlier PART=large of this call, else .cache/gpu-suite/large.json)
#   PART=84        bench 84 with ceilings and profiles (--fresh)
#   PART=33        bench 33/39 with profiles, then the size sweeps (SWEEPS= leaves them to PART=sweeps)
#   PART=train     train steps, then the peers once more (PEERS= keeps the committed ones)
#   SIXTEEN=1      the 16-bit rows of make results-16bit after PART=84, 33 or train
#   PART=b16       the 16-bit bench rows alone, appended (problems in P16, default 84,33,39)
#   PART=operator  the GPU suite's parts operator (not recorded), kernelbench (KernelBench's check at its
#                  shapes) and mixed (the bf16/fp16 cases), the last two joined into the committed
#                  validation.json (run_gpu_suite.py --append); without a carried cache it returns the
#                  build cache in parts, as PART=large
#   PART=peers     the peers once more into results/<gpu>/peers/ (make results)
#   PART=sync1     the data-parallel GPU cases at world sizes 2 and 4 over gloo on this one GPU
#                  (tests/test_sync_gpu.py, FUSEDLIB_SYNC_BACKEND=gloo): sync_validation.json
#   PART=forward   the suite's forward parts of 84 and 33 again (FPARTS: others), joined into the
#                  committed validation.json (--append: cases added to the suite since it ran)
#   PART=sweeps    the size sweeps; with SIXTEEN=1 also make results-16bit's in_features sweep
#   PART=autocast  the autocast step's kernels (run215-autocast.py) and its time against eager's in
#                  rounds (run221-ab.py), logs only
# The timed parts (84, 33, sweeps, train, b16) also return clocks.csv: nvidia-smi's SM clock, power
# and temperature every 200 ms, to read beside the rows' timestamps.
set -u
G=$(python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
echo "results/$G"
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
. lab/experiments/restore_cache.sh  # the build cache, in parts under 8 MB (dated for ninja)
. lab/experiments/start_builds.sh  # the stages and the backward, in the background
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && cat /tmp/build-*.log | tail -30
mkdir -p build/gpu-suite
case $PART in  # the timed parts: the SM clock and the board's power every 200 ms beside them (the
  84|33|sweeps|train|b16)  # bench's rows carry their timestamps), for the time a table's kernels ran at
    nvidia-smi --id=${CUDA_VISIBLE_DEVICES:-0} --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
      --format=csv,nounits -lms 200 > $OUT/clocks.csv 2> /dev/null &
    SMI=$!; trap 'kill $SMI 2> /dev/null' EXIT ;;
esac
sixteen() {  # the 16-bit tables of make results-16bit for problems $1, appended to bench.csv (SIXTEEN=1)
  python -m fusedlib bench --append --profile --problem $1 --precision 16bit --impl stages,eager,compile,gemm_only \
    > $OUT/bench16.log 2>&1
  echo "bench $1 16bit: rc=$? ($(( $(date +%s) - t0 )) s)"
}
sweeps() {  # the size sweeps, appended to bench.csv (make results; SIXTEEN=1: make results-16bit's too)
  python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
    --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1
  echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)"
  if [ -n "${SIXTEEN:-}" ]; then
    python -m fusedlib bench --append --profile --problem 84 --mode train --precision bf16,tf32 \
      --sweep in_features --impl naive,sums,fused,gemm_only >> $OUT/sweeps.log 2>&1
    echo "in_features sweep: rc=$? ($(( $(date +%s) - t0 )) s)"
  fi
}
case $PART in
  b16) sixteen ${P16:-84,33,39}; cp results/$G/bench.csv results/$G/sources.json results/$G/profile.csv $OUT/ ;;
  operator) ls .cache/flcache.part-* > /dev/null 2>&1 || tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
          timeout 560 python tests/run_gpu_suite.py --parts operator,kernelbench,mixed --append --out build/gpu-suite 2>&1 | tee $OUT/operator-suite.log
          grep -h "^FAILED" build/gpu-suite/operator.log build/gpu-suite/kernelbench.log build/gpu-suite/mixed.log | head -10
          tail -n 3 build/gpu-suite/*.log > $OUT/operator-tails.log
          (cd build && tar czf $OUT/operator-logs.tgz gpu-suite)
          cp results/$G/validation.json $OUT/ ;;
  sync1) rm -f results/$G/sync_validation.json
         FUSEDLIB_SYNC_BACKEND=gloo FUSEDLIB_SYNC_VALIDATION_OUT=results/$G/sync_validation.json timeout ${SYNC_TIMEOUT:-500} \
           python -m pytest -q -m gpu tests/test_sync_gpu.py -p no:cacheprovider -s > $OUT/sync1.log 2>&1
         echo "sync over gloo: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "world size\|passed\|failed\|^E  " $OUT/sync1.log | head -30
         cp results/$G/sync_validation.json $OUT/ 2>/dev/null ;;
  peers) rm -rf results/$G/peers
         for p in 84 33 39; do python -m fusedlib bench --problem $p --shape $p --mode train \
           --impl eager,compile,gemm_only --remeasure --out results/$G/peers/bench.csv >> $OUT/peers.log 2>&1; done
         echo "peers: rc=$? ($(( $(date +%s) - t0 )) s)"; mkdir -p $OUT/peers && cp results/$G/peers/* $OUT/peers/ ;;
  large)  tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
         timeout 480 python tests/run_gpu_suite.py --parts large --out build/gpu-suite 2>&1 | tee $OUT/large.log
         cp build/gpu-suite/large.json $OUT/; tail -n 15 build/gpu-suite/large.log > $OUT/large-tail.log ;;
  suite) [ -f build/gpu-suite/large.json ] || cp .cache/gpu-suite/large.json build/gpu-suite/  # (PART=large's of this call first)
         timeout 540 python tests/run_gpu_suite.py --out build/gpu-suite \
           --skip large 2>&1 | tee $OUT/suite.log
         tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log
         (cd build && tar czf $OUT/suite-logs.tgz gpu-suite)
         cp results/$G/validation.json $OUT/ ;;
  84) python -m fusedlib bench --fresh --ceilings --profile --problem 84 > $OUT/bench.log 2>&1
      echo "bench 84: rc=$? ($(( $(date +%s) - t0 )) s)"
      if [ -n "${SIXTEEN:-}" ]; then sixteen 84; fi ;;
  33) python -m fusedlib bench --profile --problem 33,39 > $OUT/bench.log 2>&1
      echo "bench 33,39: rc=$? ($(( $(date +%s) - t0 )) s)"
      if [ -n "${SIXTEEN:-}" ]; then sixteen 33,39; fi
      if [ -n "${SWEEPS-1}" ]; then sweeps; fi ;;
  autocast) timeout 150 python lab/experiments/run215-autocast.py > $OUT/run215-autocast.log 2>&1
            echo "run215-autocast: rc=$? ($(( $(date +%s) - t0 )) s)"; grep "µs in" $OUT/run215-autocast.log
            timeout 200 python lab/experiments/run221-ab.py > $OUT/run221-ab.log 2>&1
            echo "run221-ab: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $OUT/run221-ab.log ;;
  sweeps) sweeps; cp results/$G/bench.csv results/$G/sources.json results/$G/profile.csv $OUT/ ;;
  forward) timeout 560 python tests/run_gpu_suite.py --parts ${FPARTS:-forward-84a,forward-84b,forward-33a,forward-33b} \
             --append --out build/gpu-suite 2>&1 | tee $OUT/forward-suite.log
           tail -n 3 build/gpu-suite/forward-*.log > $OUT/forward-tails.log
           grep -h "^FAILED" build/gpu-suite/forward-*.log | head -10
           cp results/$G/validation.json $OUT/ ;;
  train) python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
          echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 22 $OUT/train_step.log
          if [ -n "${SIXTEEN:-}" ]; then  # bf16, fp16 and autocast-bf16 rows, appended (make results-16bit)
            python -m fusedlib train-step --precision 16bit,autocast-bf16 > $OUT/train_step16.log 2>&1
            echo "train-step 16bit: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 20 $OUT/train_step16.log
          fi
          cp results/$G/train_step.csv results/$G/train_step.sources.json $OUT/
          if [ -n "${PEERS-1}" ]; then  # (PEERS= : the committed peers kept)
          rm -rf results/$G/peers  # the peers once more (make results), for their run-to-run spread
          for p in 84 33 39; do python -m fusedlib bench --problem $p --shape $p --mode train \
            --impl eager,compile,gemm_only --remeasure --out results/$G/peers/bench.csv >> $OUT/peers.log 2>&1; done
          echo "peers: rc=$? ($(( $(date +%s) - t0 )) s)"; mkdir -p $OUT/peers && cp results/$G/peers/* $OUT/peers/
          fi
          [ -n "${NOTEBOOKS:-}" ] || exit 0 ;&
  notebooks) pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3
          export PYTHONPATH=/tmp/site:$PYTHONPATH
          python -m ipykernel install --user --name python3 > /dev/null 2>&1
          python notebooks/run_all.py > $OUT/notebooks.log 2>&1
          echo "notebooks: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 $OUT/notebooks.log
          tar czf $OUT/notebooks.tgz notebooks/*.ipynb ;;
esac
case $PART in
  84|33) grep -i "warning\|error\|ceilings\|wrote" $OUT/bench.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -15
         [ -f $OUT/bench16.log ] && grep -i "warning\|error\|wrote" $OUT/bench16.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -10
                cp results/$G/bench.csv results/$G/sources.json results/$G/env.json results/$G/profile.csv $OUT/ ;;
esac
