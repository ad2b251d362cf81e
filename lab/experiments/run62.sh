#!/usr/bin/env bash
# run62+ (H100): every GPU result on the current kernels (make results, in parts each under 10 min):
#   PART=suite     build (parallel), the build cache back as flcache.tgz, then make check-gpu's runner
#   PART=84        bench --fresh --ceilings --profile --problem 84
#   PART=33        bench --profile --problem 33,39
#   PART=sweeps    the size sweeps, then the train steps
#   PART=notebooks the notebooks executed in place (packages from wheels carried in .whl/:
#                  notebook-wheels.sh fetches them)
# Later parts start from the carried cache (.cache/flcache.tgz) and the committed CSVs they append to.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
# rows name the commit whose kernels they measure (the device copy's .git names another): set FUSEDLIB_COMMIT
t0=$(date +%s)
[ -d build/flcache ] || [ ! -f .cache/flcache.tgz ] || tar xzf .cache/flcache.tgz
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && cat /tmp/build-*.log | tail -30
case $PART in
  suite) tar czf $OUT/flcache.tgz build/flcache; ls -la $OUT/flcache.tgz
         python tests/run_gpu_suite.py --out build/gpu-suite 2>&1 | tee $OUT/suite.log
         tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log
         (cd build && tar czf $OUT/suite-logs.tgz gpu-suite)
         cp results/h100/validation.json $OUT/ ;;
  84) python -m fusedlib bench --fresh --ceilings --profile --problem 84 > $OUT/bench.log 2>&1
      echo "bench 84: rc=$? ($(( $(date +%s) - t0 )) s)" ;;
  33) python -m fusedlib bench --profile --problem 33,39 > $OUT/bench.log 2>&1
      echo "bench 33,39: rc=$? ($(( $(date +%s) - t0 )) s)" ;;
  sweeps) python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
            --impl stages,eager,compile,gemm_only > $OUT/bench.log 2>&1
          echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)"
          python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
          echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"
          cp results/h100/train_step.csv results/h100/train_step.sources.json $OUT/ ;;
  notebooks) pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3
          export PYTHONPATH=/tmp/site:$PYTHONPATH
          python -m ipykernel install --user --name python3 > /dev/null 2>&1
          python notebooks/run_all.py > $OUT/notebooks.log 2>&1
          echo "notebooks: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 $OUT/notebooks.log
          tar czf $OUT/notebooks.tgz notebooks/*.ipynb ;;
esac
case $PART in
  84|33|sweeps) grep -i "warning\|error\|ceilings\|wrote" $OUT/bench.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -15
                cp results/h100/bench.csv results/h100/sources.json results/h100/env.json results/h100/profile.csv $OUT/ ;;
esac
