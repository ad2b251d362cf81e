#!/usr/bin/env bash
# run201 (one H200 or H100, first call of a session), on the tree with run193-cluster.patch (as
# mended: the stage releases without cluster-scope fences), run201-partials33.patch and
# run201-wsplit.patch (3xTF32's split in shared memory no longer writes Wb back) applied
# (`git apply lab/experiments/<name>.patch`; results/h200/NOTES.md, "The clustered GEMM's half
# rate, read in its SASS"). Builds every stage and the backward (their cache back in parts,
# flcache.part-*), then:
#   run193-cluster.py    the persistent GEMM with the cluster off and on against cuBLAS (84's
#                        KernelBench shape; bf16, fp16, tf32; sums, fused; train, eval), bits
#                        compared: the call that says whether the cluster lands
#   the cluster's GPU bit-identity test (sums and fused), and 3xTF32's W split in shared memory
#   against the pass's (bit for bit: the tensor cores' truncation is Wb)
#   bench3x.csv          the 3xtf32 and fp32 forward at 1024 × 8192 → 8192 (84, 33), train, fused
#                        and eager in one run: issue 32's ratio (≤ 0.42 × eager fp32)
#   run189-backward-passes.py   the partials kernel at 33 with its new bounds (the "as is" rows)
#                        beside the variants at 2, 3 and 4 blocks an SM
#   the GPU suite's large part (large.json back, for run179.sh PART=suite on the same tree)
LOG=run201.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh  # the stages and the backward, in the background
mkdir -p build
timeout 120 python lab/experiments/run189-backward-passes.py $OUT/run189.csv > /tmp/run189.out 2>&1
say "run189 passes: rc=$? ($(( $(date +%s) - t0 )) s)"; grep "partials" /tmp/run189.out >> $OUT/run201.log
wait
say "built in $(( $(date +%s) - t0 )) s"
grep -il "error" /tmp/build-*.log && tail -40 /tmp/build-*.log | tee -a $OUT/run201.log
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
OUT=/tmp timeout 150 python lab/experiments/run193-cluster.py > /tmp/run193.out 2>&1  # its log joins run201.log: $OUT keeps 8 files
say "run193-cluster: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 14 /tmp/run193.out; cat /tmp/run193.log >> $OUT/run201.log 2>/dev/null || tail -n 30 /tmp/run193.out >> $OUT/run201.log
timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -k "cluster_launch or w_split_ways" -p no:cacheprovider > /tmp/t1.log 2>&1
say "cluster, W split tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -A20 "^E " /tmp/t1.log | head -30 >> $OUT/run201.log
timeout 150 python -m fusedlib bench --problem 84,33 --shape 1024x8192:8192 --precision 3xtf32,fp32 --mode train \
  --impl fused,eager --fresh --out $OUT/bench3x.csv > /tmp/bench3x.log 2>&1
say "bench 3xtf32: rc=$? ($(( $(date +%s) - t0 )) s)"
python - <<'PY' | tee -a $OUT/run201.log
import os, pandas as pd
b = pd.read_csv(os.path.join(os.environ["OUT"], "bench3x.csv"))
t = b.pivot_table(index="problem", columns=["precision", "impl"], values="median_ms")
t["3xtf32 fused / fp32 eager"] = t[("3xtf32", "fused")] / t[("fp32", "eager")]
print(t.round(3).to_string())
PY
mkdir -p build/gpu-suite
timeout 240 python tests/run_gpu_suite.py --parts large --out build/gpu-suite > /tmp/large.log 2>&1
say "large: rc=$? $(tail -n 1 build/gpu-suite/large.log) ($(( $(date +%s) - t0 )) s)"
cp build/gpu-suite/large.json $OUT/ 2>/dev/null; grep -h "^FAILED" build/gpu-suite/large.log | head >> $OUT/run201.log
