#!/usr/bin/env bash
# run57: the last-block merge of the fused stage (merge_column_partials, common.cuh): sums
# against fused in train mode at the KernelBench shapes, with the partial loads issued 4
# (the committed source), 16 and 32 tiles ahead (sed on the device's copy only), each
# variant built and timed in one process (bench's round-robin method, 400 calls); then the
# per-kernel profile of a fused train step (run57-backward-profile.py).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
t0=$(date +%s)
python lab/experiments/run57-backward-profile.py > $OUT/backward-profile.log 2>&1
echo "profile: rc=$? ($(( $(date +%s) - t0 )) s)"
for u in 4 16 32; do
  sed -i "s/constexpr int UNROLL = [0-9]*;/constexpr int UNROLL = $u;/" fusedlib/kernels/common.cuh
  for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" & done; wait
  for p in 84 33 39; do
    python -m fusedlib bench --problem $p --shape $p --mode train --precision tf32,3xtf32 --impl sums,fused \
      --iters 400 --rounds 20 --min-time-ms 0 --out $OUT/u$u/bench.csv >> $OUT/u$u.log 2>&1
  done
  echo "UNROLL=$u: ($(( $(date +%s) - t0 )) s)"
done
sed -i "s/constexpr int UNROLL = [0-9]*;/constexpr int UNROLL = 4;/" fusedlib/kernels/common.cuh
python - <<'PY'
import os, pandas as pd
rows = []
for u in (4, 16, 32):
    f = f"{os.environ['OUT']}/u{u}/bench.csv"
    if os.path.exists(f):
        d = pd.read_csv(f); d["unroll"] = u; rows.append(d)
d = pd.concat(rows)
t = d.pivot_table(index=["problem", "precision", "unroll"], columns="impl", values=["median_ms", "min_ms"])
t[("fused/sums", "")] = t[("median_ms", "fused")] / t[("median_ms", "sums")]
print(t.round(4).to_string())
PY
cat $OUT/backward-profile.log | head -80
