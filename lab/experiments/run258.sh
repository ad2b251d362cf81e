#!/usr/bin/env bash
# run258 (one H200 or H100; about 2 minutes with the build carried in .cache): KernelBench v0
# (128 × 1024 → 512), where the wgmma GEMM's 128 × 256 tiles give 2 tiles for 132 SMs: the fused and
# sums stages in train mode, tf32 and bf16, on each tensor-core path (FUSEDLIB_GEMM_PATH=wgmma, mma)
# against cuBLAS, with their kernels profiled, to see whether the path should follow the grid a
# shape gives (select_path) at small shapes.
LOG=run258.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"
for path in wgmma mma; do
  FUSEDLIB_GEMM_PATH=$path timeout 100 python -m fusedlib bench --problem 84,33 --shape v0 --mode train \
    --precision tf32,bf16 --impl fused,sums,gemm_only --profile --fresh --out $OUT/bench-$path.csv \
    > $OUT/bench-$path.log 2>&1
  say "$path: rc=$? ($(( $(date +%s) - t0 )) s)"
  mv $OUT/profile.csv $OUT/profile-$path.csv  # (written next to --out)
done
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
out = os.environ["OUT"]
for path in ("wgmma", "mma"):
    b = pd.read_csv(f"{out}/bench-{path}.csv")
    p = pd.read_csv(f"{out}/profile-{path}.csv")
    for r in b.itertuples():
        k = p[(p.problem == r.problem) & (p.precision == r.precision) & (p.impl == r.impl)]
        ks = " + ".join(f"{n.split('(')[0].split('<')[0].replace('void ', '')[:28]} {t:.1f}" for n, t in zip(k.kernel, k.cuda_time_us_per_call))
        print(f"{path:5s} {r.problem} {r.precision:5s} {r.impl:9s} {1e3 * r.median_ms:7.1f} us  {ks}")
PY
rm -f $OUT/env.json $OUT/sources.json $OUT/bench-*.log.tmp  # (the call returns a few files)
