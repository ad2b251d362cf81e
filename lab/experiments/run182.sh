#!/usr/bin/env bash
# run182: the rest of the refresh after run179.sh PART=84 SIXTEEN=1 in one call, each record copied
# to $OUT as soon as it is written (the device budget may end the call): bench 33/39 with profiles,
# the float32 train steps, the 16-bit bench rows of 33/39, the 16-bit train steps, then the sweeps.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
G=h200; t0=$(date +%s)
cat .cache/flcache.part-* | tar xzf -
keep() { cp results/$G/bench.csv results/$G/sources.json results/$G/env.json results/$G/profile.csv \
           results/$G/train_step.csv results/$G/train_step.sources.json $OUT/ 2>/dev/null; echo "$1: rc=$2 ($(( $(date +%s) - t0 )) s)"; }
python -m fusedlib bench --profile --problem 33,39 > $OUT/bench33.log 2>&1; keep "bench 33,39" $?
python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1; keep "train-step" $?
python -m fusedlib bench --append --profile --problem 33,39 --precision 16bit --impl stages,eager,compile,gemm_only \
  > $OUT/bench16.log 2>&1; keep "bench 33,39 16bit" $?
python -m fusedlib train-step --precision 16bit,autocast-bf16 > $OUT/train_step16.log 2>&1; keep "train-step 16bit" $?
python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
  --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1; keep "sweeps" $?
tail -n 12 $OUT/train_step.log; tail -n 12 $OUT/train_step16.log
