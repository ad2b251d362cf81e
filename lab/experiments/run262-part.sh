#!/usr/bin/env bash
# run262 (issue 36, item 5; branch idlemerge): the merges of the persistent wgmma GEMM raced by the
# producer warpgroup's idle warps (epilogue.cuh idle_merges) against the merge units alone. A part
# script for run220.sh (R179=lab/experiments/run262-part.sh): PART=ab is this run's own, every other
# PART is run179.sh's. The call, on two H200s, with no build carried (about 9 minutes):
#   R179=lab/experiments/run262-part.sh bash lab/experiments/run220.sh "PART=ab" "PART=suite" "PART=large"
# GPU 1: the whole GPU suite on the branch's kernels (test_merge_parties_are_bit_identical among
# the gradients part); GPU 0: PART=ab, then the large part.
# PART=ab: train mode at the KernelBench shapes, bf16 and tf32, the fused and sums stages and cuBLAS's
# GEMM alone, kernels profiled, once with the merges raced (the default) and once by the merge units
# alone ($FUSEDLIB_WGMMA_MERGE=units: main's schedule, with the consumers' 208 registers); then
# KernelBench v0 (128 × 1024 → 512) in bf16 with split-K forced to 1, 2, 4 and 8
# (FUSEDLIB_WGMMA_SPLITK; the rule gives 2) against its 24–30 µs GEMM (cuBLAS's: 4.7, run258).
# Prints the fused GEMM kernel (race, units), the sums stage's, cuBLAS's and the row pass a row; the
# CSVs come back in ab.tgz.
set -u
[ "$PART" = ab ] || exec bash lab/experiments/run179.sh
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p $OUT/ab
for party in race units; do
  for p in 84 33 39; do
    FUSEDLIB_WGMMA_MERGE=${party/race/} timeout 120 python -m fusedlib bench --problem $p --shape $p --mode train \
      --precision bf16,tf32 --impl fused,sums,gemm_only --profile --append --out $OUT/ab/$party/bench.csv \
      >> $OUT/ab/bench-$party.log 2>&1
    echo "$party $p: rc=$? ($(( $(date +%s) - t0 )) s)"
  done
done
for s in 1 2 4 8; do
  FUSEDLIB_WGMMA_SPLITK=$s timeout 60 python -m fusedlib bench --problem 84 --shape v0 --mode train \
    --precision bf16 --impl fused,sums,gemm_only --profile --append --out $OUT/ab/v0-s$s/bench.csv \
    >> $OUT/ab/bench-v0.log 2>&1
  echo "v0 S=$s: rc=$? ($(( $(date +%s) - t0 )) s)"
done
python - <<'PY'
import os, pandas as pd
ab = os.environ["OUT"] + "/ab"
def load(name):
    try:
        return pd.read_csv(f"{ab}/{name}/bench.csv"), pd.read_csv(f"{ab}/{name}/profile.csv")
    except FileNotFoundError:
        return None, None
def kernel(p, problem, prec, impl, key):
    k = p[(p.problem.astype(str) == str(problem)) & (p.precision == prec) & (p.impl == impl) & p.kernel.str.contains(key)]
    return k.cuda_time_us_per_call.sum() if len(k) else float("nan")
def median(b, problem, prec, impl):
    r = b[(b.problem.astype(str) == str(problem)) & (b.precision == prec) & (b.impl == impl)]
    return 1e3 * r.median_ms.iloc[0] if len(r) else float("nan")
(br, pr), (bu, pu) = load("race"), load("units")
print("problem prec | fused GEMM race  units | sums GEMM | cuBLAS | row pass | fwd race  units  F.linear | race/cuBLAS  fwd/F.linear")
for problem in (84, 33, 39):
    for prec in ("bf16", "tf32"):
        if pr is None or pu is None: break
        fr, fu = kernel(pr, problem, prec, "fused", "gemm_kernel"), kernel(pu, problem, prec, "fused", "gemm_kernel")
        sg, cb = kernel(pr, problem, prec, "sums", "gemm_kernel"), kernel(pr, problem, prec, "gemm_only", "")
        row = kernel(pr, problem, prec, "fused", "^(?!.*gemm_kernel)")
        mr, mu, ml = median(br, problem, prec, "fused"), median(bu, problem, prec, "fused"), median(br, problem, prec, "gemm_only")
        print(f"{problem} {prec:5s} | {fr:7.1f} {fu:7.1f} | {sg:7.1f} | {cb:6.1f} | {row:6.1f} | {mr:6.1f} {mu:6.1f} {ml:6.1f} | {fr / cb:5.3f}  {mr / ml:5.3f}")
for s in (1, 2, 4, 8):
    b, p = load(f"v0-s{s}")
    if b is None: continue
    print(f"v0 bf16 S={s}: fused GEMM {kernel(p, 84, 'bf16', 'fused', 'gemm_kernel'):.1f} sums GEMM "
          f"{kernel(p, 84, 'bf16', 'sums', 'gemm_kernel'):.1f} cuBLAS {kernel(p, 84, 'bf16', 'gemm_only', ''):.1f} | "
          f"fwd {median(b, 84, 'bf16', 'fused'):.1f} F.linear {median(b, 84, 'bf16', 'gemm_only'):.1f} us")
PY
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
