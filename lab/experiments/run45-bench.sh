#!/usr/bin/env bash
# run45+: the benchmark on the current kernels, split by problem (each call under 10 min):
#   run45: PART=84   bench --fresh --ceilings --profile --problem 84
#   run46: PART=33   bench --profile --problem 33,39
#   run47: PART=sweeps  the size sweeps
#   run48: PART=notebooks  the train steps again (peak memory with the gradients let go
#          first), then the notebooks executed in place (run49: SKIP_STEP=1, the notebooks)
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" & done
python -c "from fusedlib.build import load_backward; load_backward()" &
wait
echo "built in $(( $(date +%s) - t0 )) s"
case $PART in
  84) python -m fusedlib bench --fresh --ceilings --profile --problem 84 > $OUT/bench.log 2>&1 ;;
  33) python -m fusedlib bench --profile --problem 33,39 > $OUT/bench.log 2>&1 ;;
  sweeps) python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
            --impl stages,eager,compile,gemm_only > $OUT/bench.log 2>&1
          echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)" ;;
  notebooks) if [ -z "${SKIP_STEP:-}" ]; then
            python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
            echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"
            cp results/h100/train_step.csv results/h100/train_step.sources.json $OUT/
          fi
          # the notebook runner's packages, from wheels carried in .whl/ (the machine is offline; the
          # carry limit leaves out what nothing here imports: debugpy, jedi, fonttools)
          pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3
          export PYTHONPATH=/tmp/site:$PYTHONPATH
          python -m ipykernel install --user --name python3 > /dev/null 2>&1
          python notebooks/run_all.py > $OUT/notebooks.log 2>&1
          echo "notebooks: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 $OUT/notebooks.log
          tar czf $OUT/notebooks.tgz notebooks/*.ipynb ;;
esac
echo "bench: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -i "warning\|error\|ceilings\|wrote" $OUT/bench.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -15
[ "$PART" = notebooks ] || cp results/h100/bench.csv results/h100/sources.json results/h100/env.json results/h100/profile.csv $OUT/
