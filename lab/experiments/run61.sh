#!/usr/bin/env bash
# run61 (H100): the SIMT mainloop with float4 loads as a compile-time choice (no scalar path in
# the VEC kernels: 128×64 BK 16 then needs no spills), three tile variants built side by side on
# copies of the tree (sed), timed by run60-simt-time.py.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
R=$PWD
variants=("128, 128, 16, 8, 8, 1" "128, 64, 16, 8, 8, 2" "128, 128, 32, 8, 8, 1")
for i in 0 1 2; do
  d=/tmp/v$i; rm -rf $d; mkdir -p $d; cp -r fusedlib results $d/
  sed -i "s/launch_simt_gemm<128, 128, 16, 8, 8, 1, Epi>/launch_simt_gemm<${variants[$i]}, Epi>/" $d/fusedlib/kernels/gemm.cuh
  (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=$d/cache python -c "from fusedlib.build import load_stage; load_stage('naive')" > $OUT/build-v$i.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log
for i in 0 1 2; do (cd /tmp/v$i && PYTHONPATH=/tmp/v$i FUSEDLIB_CACHE=/tmp/v$i/cache python $R/lab/experiments/run60-simt-time.py "${variants[$i]}") 2>&1 | grep -v -i warn; done
echo "simt: ($(( $(date +%s) - t0 )) s)"
