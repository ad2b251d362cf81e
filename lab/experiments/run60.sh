#!/usr/bin/env bash
# run60 (H100): SIMT tile variants of the engine (sed on copies of the tree, built side by side),
# timed by run60-simt-time.py; then the fused epilogue's order (partials and count before the
# Z' stores, the committed source, against Z' stores first, run58's source), sums and fused at
# 33 and 84 train tf32, alternating three times (400 calls in 20 rounds each).
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
R=$PWD
variants=("128, 128, 16, 8, 8, 1" "128, 64, 8, 8, 8, 2" "128, 128, 8, 8, 8, 1" "128, 64, 16, 8, 8, 2")
for i in 0 1 2 3; do
  d=/tmp/v$i; rm -rf $d; mkdir -p $d; cp -r fusedlib results $d/
  sed -i "s/launch_simt_gemm<128, 128, 16, 8, 8, 1, Epi>/launch_simt_gemm<${variants[$i]}, Epi>/" $d/fusedlib/kernels/gemm.cuh
  (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=$d/cache python -c "from fusedlib.build import load_stage; load_stage('naive')" > $OUT/build-v$i.log 2>&1) &
done
d=/tmp/old; rm -rf $d; mkdir -p $d; cp -r fusedlib results $d/; cp $R/build/epi_old.cuh $d/fusedlib/kernels/epilogue.cuh
for s in sums fused; do
  (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=$d/cache python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-old-$s.log 2>&1) &
  (PYTHONPATH=$R FUSEDLIB_CACHE=$R/build/flcache python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-new-$s.log 2>&1) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log
for i in 0 1 2 3; do (cd /tmp/v$i && PYTHONPATH=/tmp/v$i FUSEDLIB_CACHE=/tmp/v$i/cache python $R/lab/experiments/run60-simt-time.py "${variants[$i]}") 2>&1 | grep -v Warning; done
echo "simt: ($(( $(date +%s) - t0 )) s)"
for rep in 1 2 3; do
  for v in new old; do
    if [ $v = new ]; then d=$R; c=$R/build/flcache; else d=/tmp/old; c=/tmp/old/cache; fi
    for p in 33 84; do
      (cd $d && PYTHONPATH=$d FUSEDLIB_CACHE=$c python -m fusedlib bench --problem $p --shape $p --mode train --precision tf32 --impl sums,fused \
        --iters 400 --rounds 20 --min-time-ms 0 --out /tmp/ab-$v/bench.csv > /dev/null 2>&1)
    done
  done
done
echo "A/B: ($(( $(date +%s) - t0 )) s)"
python - <<'PY'
import pandas as pd
rows = []
for v in ("new", "old"):
    d = pd.read_csv(f"/tmp/ab-{v}/bench.csv"); d["epilogue"] = v; d["rep"] = d.groupby(["problem", "impl"]).cumcount(); rows.append(d)
d = pd.concat(rows)
t = d.pivot_table(index=["problem", "epilogue", "rep"], columns="impl", values=["median_ms", "min_ms"])
t[("fused/sums", "median")] = t[("median_ms", "fused")] / t[("median_ms", "sums")]
t[("fused/sums", "min")] = t[("min_ms", "fused")] / t[("min_ms", "sums")]
print(t.round(4).to_string())
PY
