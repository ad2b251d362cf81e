#!/usr/bin/env bash
# run59 (H100): the engine's new SIMT mainloop (128×128 tiles, 8×8 a thread, float4 loads, two
# shared-memory stages) and the fused epilogue's partials counted before its Z' stores.
#   1. build every stage and the backward (parallel);
#   2. correctness: fp32 every stage × mode × problem on the GPU suite's shapes (2 seeds), fused
#      and sums tf32/3xtf32 on both tensor-core paths;
#   3. run58-simt-proto.py: the prototype's six variants against cuBLAS and the engine (now the new one);
#   4. timing: sums vs fused (train, tf32/3xtf32, the three KernelBench shapes, 400 calls in 20 rounds),
#      and fp32 naive/fused vs gemm_only and eager at 84 and 39.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > $OUT/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; tail -3 $OUT/build-*.log | grep -i error
export FUSEDLIB_POISON=1
SH="--shape 84 --shape v0 --shape 257x1000->999 --shape 640x1000->1000 --shape 2x64->3 --shape 7x33->65"
python -m fusedlib check --device cuda --problem 84,33 --stage all --mode all --precision fp32 $SH --seeds 2 > $OUT/check.log 2>&1
echo "check fp32: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -4 $OUT/check.log
for path in wgmma mma; do
  FUSEDLIB_GEMM_PATH=$path python -m fusedlib check --device cuda --problem 84,33 --stage sums,fused --mode train --precision tf32,3xtf32 $SH --seeds 2 >> $OUT/check.log 2>&1
  echo "check fused $path: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $OUT/check.log
done
python -m fusedlib check --device cuda --grad --problem 84,33 --stage fused --precision fp32 --seeds 2 >> $OUT/check.log 2>&1
echo "check grad fp32: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $OUT/check.log
unset FUSEDLIB_POISON
timeout 200 python lab/experiments/run58-simt-proto.py > $OUT/simt-proto.log 2>&1
echo "proto: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -A12 "^| shape" $OUT/simt-proto.log; grep "correctness:" $OUT/simt-proto.log
for p in 84 33 39; do
  python -m fusedlib bench --problem $p --shape $p --mode train --precision tf32,3xtf32 --impl sums,fused \
    --iters 400 --rounds 20 --min-time-ms 0 --out $OUT/ab/bench.csv >> $OUT/ab.log 2>&1
done
echo "A/B: ($(( $(date +%s) - t0 )) s)"
for p in 84 39; do
  python -m fusedlib bench --problem $p --shape $p --mode train --precision fp32 --impl naive,fused,gemm_only,eager \
    --iters 50 --out $OUT/fp32/bench.csv >> $OUT/fp32.log 2>&1
done
echo "fp32: ($(( $(date +%s) - t0 )) s)"
python - <<'PY'
import os, pandas as pd
out = os.environ["OUT"]
for f in ("ab", "fp32"):
    p = f"{out}/{f}/bench.csv"
    if os.path.exists(p):
        d = pd.read_csv(p)
        t = d.pivot_table(index=["problem", "precision"], columns="impl", values="median_ms")
        if f == "ab":
            t["fused/sums"] = t["fused"] / t["sums"]
        else:
            t["fused/gemm"] = t["fused"] / t["gemm_only"]
        print(t.round(4).to_string())
PY
