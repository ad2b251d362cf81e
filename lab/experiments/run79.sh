#!/usr/bin/env bash
# run79 (H100): the 3xTF32 GEMM on 128×168 tiles (current kernels) against 128×192 (.cache/old,
# commit cbbe55d) at five shapes, each build twice in turn (run79-time.py): where 168 wins.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
for s in naive sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-new-$s.log 2>&1 &
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oldcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"
L=$PWD/lab/experiments/run79-time.py
for rep in 1 2; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 90 python $L 168 2>&1 | grep -v -i warn
  (cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oldcache timeout 90 python $L 192) 2>&1 | grep -v -i warn
done
echo "done ($(( $(date +%s) - t0 )) s)"
