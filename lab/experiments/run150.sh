#!/usr/bin/env bash
# run150 (H100): every GPU result on the kernels of k32 (blocked merge of the backward's tile partials,
# compensated column moments in naive/fold, the device's SM count in the elementwise grids):
#   PART=large     build (parallel), the build cache back as flcache.tgz, then the GPU suite's large part
#                  alone (sizes past 2^31 elements); its record large.json back (carried into later parts
#                  as .cache/gpu-suite/large.json)
#   PART=suite     every other part of the GPU suite, joined with the carried large record
#   PART=84 / 33 / train (NOTEBOOKS=1): as run149.sh
# Later parts start from the carried cache (.cache/flcache.tgz) and the committed CSVs they append to.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
ls .cache/flcache.part-* > /dev/null 2>&1 && cat .cache/flcache.part-* | tar xzf -  # the build cache, in parts under 8 MB
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && cat /tmp/build-*.log | tail -30
mkdir -p build/gpu-suite
case $PART in
  large)          timeout 480 python tests/run_gpu_suite.py --parts large --out build/gpu-suite 2>&1 | tee $OUT/large.log
         cp build/gpu-suite/large.json $OUT/; tail -n 15 build/gpu-suite/large.log > $OUT/large-tail.log ;;
  suite) cp .cache/gpu-suite/large.json build/gpu-suite/
         tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
         timeout 540 python tests/run_gpu_suite.py --out build/gpu-suite \
           --parts forward-84,forward-33,forward-39a,forward-39b,gradients,sanitizer,training,operator 2>&1 | tee $OUT/suite.log
         tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log
         (cd build && tar czf $OUT/suite-logs.tgz gpu-suite)
         cp results/h100/validation.json $OUT/ ;;
  84) python -m fusedlib bench --fresh --ceilings --profile --problem 84 > $OUT/bench.log 2>&1
      echo "bench 84: rc=$? ($(( $(date +%s) - t0 )) s)" ;;
  33) python -m fusedlib bench --profile --problem 33,39 > $OUT/bench.log 2>&1
      echo "bench 33,39: rc=$? ($(( $(date +%s) - t0 )) s)"
      python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
            --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1
      echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)" ;;
  train) python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
          echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 22 $OUT/train_step.log
          cp results/h100/train_step.csv results/h100/train_step.sources.json $OUT/
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
                cp results/h100/bench.csv results/h100/sources.json results/h100/env.json results/h100/profile.csv $OUT/ ;;
esac
