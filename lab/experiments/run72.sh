#!/usr/bin/env bash
# run72 (H100): run71 again, round-robin (run72-time.py), each build in turn three times:
# the persistent GEMM (epilogue chunks of 32 and of 64 columns), one CTA a tile, and the
# previous kernels (.cache/old, commit cbbe55d).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
rm -rf /tmp/c64 && mkdir -p /tmp/c64 && cp -r fusedlib /tmp/c64/
sed -i 's/return bn % 32 == 0 ? 32 :/return bn % 64 == 0 ? 64 : bn % 32 == 0 ? 32 :/' /tmp/c64/fusedlib/kernels/gemm_wgmma.cuh
for s in naive sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-new-$s.log 2>&1 &
  (cd /tmp/c64 && PYTHONPATH=/tmp/c64 FUSEDLIB_CACHE=/tmp/c64/cache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-c64-$s.log 2>&1) &
  (cd .cache/old && PYTHONPATH=$PWD/.cache/old FUSEDLIB_CACHE=/tmp/oldcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-old-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -20 /tmp/b-*.log
L=$PWD/lab/experiments/run72-time.py
for rep in 1 2 3; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 60 python $L persistent 2>&1 | grep -v Warn
  FUSEDLIB_WGMMA_GRID=100000 PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 60 python $L one-tile-a-CTA 2>&1 | grep -v Warn
  (cd /tmp/c64 && PYTHONPATH=/tmp/c64 FUSEDLIB_CACHE=/tmp/c64/cache timeout 60 python $L c64) 2>&1 | grep -v Warn
  (cd .cache/old && PYTHONPATH=$PWD FUSEDLIB_CACHE=/tmp/oldcache timeout 60 python $L old) 2>&1 | grep -v Warn
done
echo "done ($(( $(date +%s) - t0 )) s)"
