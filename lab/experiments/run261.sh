#!/usr/bin/env bash
# run261 (one H200 or H100; issue 36; about 2 minutes with the build carried in .cache): where the
# wgmma GEMM's time goes at KernelBench v0 (128 × 1024 → 512), where it takes 24–30 µs against
# cuBLAS's 4.7 (run258). The tiles are 2 (128 × 256) and wg_split_k splits K into S parts of at least
# kMinSplitSteps steps: S = 4 in tf32 (32 steps of 32), S = 2 in bf16 (16 steps of 64), so 8 or 4
# CTAs run. Does the time follow the CTAs (S forced to 1 … 16 by FUSEDLIB_WGMMA_SPLITK), or is it a
# fixed cost of the launch, the split-K reduction or the merge units?
#  1. the sums and fused stages' train forward and cuBLAS, tf32 and bf16, at each S, kernels
#     profiled (bench --profile; fresh CSVs under $OUT);
#  2. Nsight Compute (if this machine's runtime lets it read the counters: Firecracker) on the fused
#     bf16 GEMM kernel at the default S: speed of light, warp states, memory workload.
# Prints one line a (S, precision, stage): the forward's median and its kernels; the CSVs and logs
# come back packed in run261.tgz (a call returns a few files).
LOG=run261.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"
for s in 1 2 4 8 16; do
  FUSEDLIB_WGMMA_SPLITK=$s timeout 100 python -m fusedlib bench --problem 84,33 --shape v0 --mode train \
    --precision tf32,bf16 --impl fused,sums,gemm_only --profile --fresh --out $OUT/bench-s$s.csv \
    > $OUT/bench-s$s.log 2>&1
  say "S=$s: rc=$? ($(( $(date +%s) - t0 )) s)"
  mv $OUT/profile.csv $OUT/profile-s$s.csv  # (written next to --out)
done
cat > /tmp/v0_forward.py <<'PY'
import torch
from fusedlib import FusedGemmBatchNormScalingSoftmax
torch.manual_seed(0)
m = FusedGemmBatchNormScalingSoftmax(1024, 512, stage="fused", precision="tf32").cuda().to(torch.bfloat16)
x = torch.randn(128, 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    m(x)
torch.cuda.synchronize()
PY
timeout 120 ncu --clock-control none --kernel-name regex:wgmma_gemm --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
  python /tmp/v0_forward.py > $OUT/ncu-v0.log 2>&1
say "ncu: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "Duration|Elapsed Cycles|Throughput|Stall|Grid Size|Warp Cycles" $OUT/ncu-v0.log | head -30 | tee -a $OUT/$LOG
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
out = os.environ["OUT"]
for s in (1, 2, 4, 8, 16):
    try:
        b = pd.read_csv(f"{out}/bench-s{s}.csv")
        p = pd.read_csv(f"{out}/profile-s{s}.csv")
    except FileNotFoundError:
        print(f"S={s}: no records"); continue
    for r in b.itertuples():
        k = p[(p.problem == r.problem) & (p.precision == r.precision) & (p.impl == r.impl)]
        ks = " + ".join(f"{n.split('(')[0].split('<')[0].replace('void ', '')[:24]} {t:.1f}" for n, t in zip(k.kernel, k.cuda_time_us_per_call))
        print(f"S={s:2d} {r.problem} {r.precision:5s} {r.impl:9s} {1e3 * r.median_ms:7.1f} us  {ks}")
PY
rm -f $OUT/env.json $OUT/sources.json
tar czf $OUT/run261.tgz -C $OUT $(cd $OUT && ls bench-s* profile-s* ncu-v0.log 2>/dev/null) && (cd $OUT && rm -f bench-s* profile-s* ncu-v0.log)
