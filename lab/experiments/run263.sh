#!/usr/bin/env bash
# run263 (one H200; issue 36, item 5; branch idlemerge, about 7 minutes, no build carried): the idle
# warps' merges after run262, where they lost 20–90 µs by claiming the last column blocks too (their
# merge, a column a lane, then ran past the last tile). Now only the blocks that complete at least
# ⌈row_tiles / 32⌉ waves of tiles before the last are raced (wg_raced_block: at 84 and 33 blocks 0–14
# of 32; at 39 none), and a chain alone skips its empty chains' loads. Against main's kernels in the
# same call (lab/experiments/run263-main.tgz: `git archive main fusedlib pyproject.toml`, built in
# /tmp/main beside the branch's): bf16, train, KernelBench shapes, the fused and sums stages and
# cuBLAS's GEMM alone, kernels profiled; main, the branch raced and the branch's merge units alone
# (FUSEDLIB_WGMMA_MERGE=units) in turn. The measure is each call's fused GEMM kernel over its sums
# GEMM kernel (the merges' share), which clock drift between calls leaves alone.
# The branch's diff against main: lab/experiments/run262-idlemerge.patch.
LOG=run263.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
. lab/experiments/ab.sh  # build_ab (its bench replaced below)
AB_MAIN=lab/experiments/run263-main.tgz build_ab sums fused
bench() {  # name problem [env...]: one bench call into $OUT/ab/<name>/
  local name=$1 p=$2; shift 2
  env "$@" timeout 100 python -m fusedlib bench --problem $p --shape $p --mode train --precision bf16 \
    --impl fused,sums,gemm_only --profile --append --out $OUT/ab/$name/bench.csv >> $OUT/ab/bench.log 2>&1
  say "$name $p: rc=$? ($(( $(date +%s) - t0 )) s)"
}
for p in 84 33 39; do
  (export PYTHONPATH=/tmp/main FUSEDLIB_CACHE=/tmp/main/build/flcache; cd /tmp/main && \
   timeout 100 python -m fusedlib bench --problem $p --shape $p --mode train --precision bf16 \
     --impl fused,sums,gemm_only --profile --append --out $OUT/ab/main/bench.csv >> $OUT/ab/bench.log 2>&1
   echo "main $p: rc=$? ($(( $(date +%s) - t0 )) s)") | tee -a $OUT/$LOG
  bench race $p FUSEDLIB_WGMMA_MERGE=
  [ $p = 39 ] || bench units $p FUSEDLIB_WGMMA_MERGE=units
done
# the merge parties' bits and the grid sizes' on the refined kernel (tests/test_gpu.py; record left out)
FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33,39 timeout 150 python -m pytest -m gpu -q -p no:cacheprovider \
  tests/test_gpu.py -k "merge_parties or persistent_grid" > $OUT/tests.log 2>&1
say "tests: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
ab = os.environ["OUT"] + "/ab"
def kernel(p, problem, impl, key):
    k = p[(p.problem.astype(str) == str(problem)) & (p.impl == impl) & p.kernel.str.contains(key)]
    return k.cuda_time_us_per_call.sum() if len(k) else float("nan")
def median(b, problem, impl):
    r = b[(b.problem.astype(str) == str(problem)) & (b.impl == impl)]
    return 1e3 * r.median_ms.iloc[0] if len(r) else float("nan")
print("bf16 train     | fused GEMM | sums GEMM | merges | cuBLAS | row pass | fused fwd | F.linear | GEMM/cuBLAS fwd/F.linear")
for problem in (84, 33, 39):
    for name in ("main", "race", "units"):
        try:
            b, p = pd.read_csv(f"{ab}/{name}/bench.csv"), pd.read_csv(f"{ab}/{name}/profile.csv")
        except FileNotFoundError:
            continue
        f, s, c = kernel(p, problem, "fused", "gemm_kernel"), kernel(p, problem, "sums", "gemm_kernel"), kernel(p, problem, "gemm_only", "")
        if f != f: continue
        row = kernel(p, problem, "fused", "^(?!.*gemm_kernel)")
        mf, ml = median(b, problem, "fused"), median(b, problem, "gemm_only")
        print(f"{problem} {name:5s}       | {f:9.1f} | {s:8.1f} | {f - s:6.1f} | {c:6.1f} | {row:7.1f} | {mf:8.1f} | {ml:7.1f} | {f / c:6.3f} {mf / ml:6.3f}")
PY
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
