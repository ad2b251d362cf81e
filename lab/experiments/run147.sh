#!/usr/bin/env bash
# run147: the split variants of run147-variants.py against HEAD's kernels (.base), two rounds.
set -u
export PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
(cd .base && PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python $L/run147-variants.py build base > /tmp/b-base.log 2>&1) &
for v in 0 1 2 3; do PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python $L/run147-variants.py build $v > /tmp/b-$v.log 2>&1 & done
wait; echo "built ($(( $(date +%s) - t0 )) s)"; tail -n 3 /tmp/b-*.log | grep -i error
for r in 1 2; do
  (cd .base && PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python $L/run147-variants.py time base 2>&1 | grep variant)
  for v in 0 1 2 3; do PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python $L/run147-variants.py time $v 2>&1 | grep variant; done
done | tee $OUT/run147.log
echo "done ($(( $(date +%s) - t0 )) s)"
