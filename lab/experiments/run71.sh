#!/usr/bin/env bash
# run71 (H100): where the persistent wgmma GEMM's time goes: the GEMM kernel of naive (plain
# stores), sums (statistics) and fused (statistics + merge) at 84, tf32 and 3xtf32, for
# persistent grids and one CTA a tile ($FUSEDLIB_WGMMA_GRID), epilogue chunks of 32 and 64
# columns, and 3xTF32 tiles of 168 and 192 columns (variant copies under /tmp).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
mk() {  # variant name, sed expression on gemm_wgmma.cuh
  rm -rf /tmp/$1 && mkdir -p /tmp/$1 && cp -r fusedlib /tmp/$1/ && sed -i "$2" /tmp/$1/fusedlib/kernels/gemm_wgmma.cuh
  grep -c "$3" /tmp/$1/fusedlib/kernels/gemm_wgmma.cuh
}
mk c64 's/return bn % 32 == 0 ? 32 :/return bn % 64 == 0 ? 64 : bn % 32 == 0 ? 32 :/' "bn % 64 == 0 ? 64"
mk n192 's/constexpr int kSplitBN = 168;/constexpr int kSplitBN = 192;/' "kSplitBN = 192"
for s in naive sums fused; do
  PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-new-$s.log 2>&1 &
  for v in c64 n192; do
    (cd /tmp/$v && PYTHONPATH=/tmp/$v FUSEDLIB_CACHE=/tmp/$v/cache python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/b-$v-$s.log 2>&1) &
  done
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b-*.log && tail -20 /tmp/b-*.log
L=$PWD/lab/experiments/run71-time.py
PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 100 python $L persistent 2>&1 | grep -v Warn
FUSEDLIB_WGMMA_GRID=100000 PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache timeout 100 python $L one-tile-a-CTA 2>&1 | grep -v Warn
for v in c64 n192; do (cd /tmp/$v && PYTHONPATH=/tmp/$v FUSEDLIB_CACHE=/tmp/$v/cache timeout 100 python $L $v) 2>&1 | grep -v Warn; done
(cd /tmp/c64 && FUSEDLIB_WGMMA_GRID=100000 PYTHONPATH=/tmp/c64 FUSEDLIB_CACHE=/tmp/c64/cache timeout 100 python $L c64-one-tile) 2>&1 | grep -v Warn
echo "done ($(( $(date +%s) - t0 )) s)"
