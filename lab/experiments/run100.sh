#!/usr/bin/env bash
# run100 (H100): main's merging epilogue (run100-epilogue-main.cuh: fusedlib/kernels/epilogue.cuh of 1ee85e1,
# copied beside this script for the run) against the stores-last one:
# fused and sums stages built side by side, then run100-time.py per variant, two rounds in turn.
set -u
export PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
rm -rf /tmp/main && mkdir -p /tmp/main && cp -r fusedlib /tmp/main/ && cp $L/run100-epilogue-main.cuh /tmp/main/fusedlib/kernels/epilogue.cuh
for v in next main; do
  d=$PWD; [ $v = main ] && d=/tmp/main
  for s in sums fused; do
    (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=/tmp/cache-$v python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$v-$s.log 2>&1) &
  done
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log
for round in 1 2; do
  for v in main next; do
    d=$PWD; [ $v = main ] && d=/tmp/main
    (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=/tmp/cache-$v timeout 200 python $L/run100-time.py $v) 2>&1 | grep -v -i warn | tee -a $OUT/time.log
  done
done
echo "done ($(( $(date +%s) - t0 )) s)"
