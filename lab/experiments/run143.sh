#!/usr/bin/env bash
# run143 (H100; the tree of branch cluster-multicast): energy per GEMM under the power cap (run143-energy.py):
# clusters with TMA multicast against single CTAs against cuBLAS, sustained back-to-back phases.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
L=results/h100/logs
t0=$(date +%s)
python -c "from fusedlib.build import load_stage; load_stage('fused')" > $OUT/build.log 2>&1; tail -3 $OUT/build.log
echo "built ($(( $(date +%s) - t0 )) s)"
python $L/run143-energy.py 2>&1 | grep -v -i warn | tee $OUT/run143.log
echo "done ($(( $(date +%s) - t0 )) s)"
