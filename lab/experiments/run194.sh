#!/usr/bin/env bash
# run194 (one H200 or H100, one call), on the tree with run197-merge.patch (then run192-vectors and
# run192-backward) and run193-cluster.patch applied (`git apply lab/experiments/<name>.patch`;
# results/h200/NOTES.md, "Three patches tried on the GPU"). Builds sums, fused and
# the backward; run193-cluster.py (the persistent GEMM with a 1 × 2 cluster multicasting W, against
# itself without and cuBLAS); the cluster's bit-identity test on the fused stage; the 16-bit tests
# of the C++ forward's widened vectors and the backward's passes (sums/fused); then bf16/fp16 at the
# KernelBench shape of 84 and 33, train, into $OUT/bench16.csv (a trial, not results/). A failed
# cluster experiment turns the cluster off for what follows (FUSEDLIB_WGMMA_CLUSTER=0).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "$*" | tee -a $OUT/run194.log; }
. lab/experiments/restore_cache.sh
for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
say "built in $(( $(date +%s) - t0 )) s"
grep -il "error" /tmp/build-*.log && tail -40 /tmp/build-*.log | tee -a $OUT/run194.log
timeout 100 python lab/experiments/run193-cluster.py > /tmp/run193.out 2>&1; rc=$?
say "run193-cluster: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -n 30 /tmp/run193.out >> $OUT/run194.log
[ $rc -ne 0 ] && export FUSEDLIB_WGMMA_CLUSTER=0 && say "cluster off from here"
timeout 80 python -m pytest -q -m gpu tests/test_gpu.py -k "cluster_launch and fused" -p no:cacheprovider -x > /tmp/t1.log 2>&1
say "cluster test (fused): rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -A20 "^E " /tmp/t1.log | head -30 >> $OUT/run194.log
timeout 90 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider \
  -k "(strided or eager_call or last_pass or backward_passes or backward_call or cpp_node) and not naive and not fold" > /tmp/t2.log 2>&1
say "16-bit tests: rc=$? $(tail -n 1 /tmp/t2.log) ($(( $(date +%s) - t0 )) s)"; grep -B2 -A20 "^E " /tmp/t2.log | head -40 >> $OUT/run194.log
timeout 110 python -m fusedlib bench --problem 84,33 --shape 1024x8192:8192 --precision bf16,fp16 --mode train \
  --impl sums,fused,eager,gemm_only --fresh --out $OUT/bench16.csv > /tmp/bench.log 2>&1
say "bench: rc=$? ($(( $(date +%s) - t0 )) s)"
python - <<'PY' | tee -a $OUT/run194.log
import os, pandas as pd
b = pd.read_csv(os.path.join(os.environ["OUT"], "bench16.csv"))
print(b[["problem", "mode", "precision", "impl", "median_ms", "min_ms", "host_us"]].to_string(index=False))
PY
