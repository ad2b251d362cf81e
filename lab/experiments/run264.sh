#!/usr/bin/env bash
# run264 (one H200; issue 36, item 5; branch idlecount, about 8 minutes, no build carried): the
# persistent wgmma GEMM's tile counts handed to the producer warpgroup's warp 1 (epilogue.cuh
# hand_count, counting_warp) instead of every consumer fencing and waiting at a barrier a tile, and
# Z''s stores first; and a persistent launch of a CTA a merge unit as well where the SMs allow (v0).
# run263 put the fused GEMM kernel's time over the sums stage's at 6.3 / 6.6 / 19.1 µs (84 / 33 /
# 39, bf16), which a fence a wave (2 / 2 / 15.5 waves) fits. Against main's kernels built in the same
# call (lab/experiments/run264-main.tgz: `git archive main fusedlib pyproject.toml`): train, bf16 and
# tf32, the KernelBench shapes and v0, the fused and sums stages and cuBLAS's GEMM alone, kernels
# profiled, main and the branch in turn; then the branch's persistent-grid, rerun and fused-stage
# forward cases of 84 and 33 (tests/test_gpu.py, record left out). The measure is each bench call's
# fused GEMM kernel over its sums GEMM kernel.
# The branch's diff against main: lab/experiments/run264-idlecount.patch (with the launch rule changed
# after this run: at least as many CTAs as merge units, not one for every unit).
LOG=run264.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
. lab/experiments/ab.sh  # build_ab, bench
build_ab sums fused
for ps in "84 84" "33 33" "39 39" "84 v0" "33 v0"; do
  bench main /tmp/main $ps
  bench branch $PWD $ps
done
FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33 timeout 200 python -m pytest -m gpu -q -p no:cacheprovider \
  tests/test_gpu.py -k "persistent_grid or reruns_are_bit_identical or (case_matches and fused)" > $OUT/tests.log 2>&1
say "tests: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/tests.log | head -5 | tee -a $OUT/$LOG
python - <<'PY' | tee -a $OUT/$LOG
import os, pandas as pd
ab = os.environ["OUT"] + "/ab"
def kernel(p, problem, shape, prec, impl, key):
    k = p[(p.problem.astype(str) == str(problem)) & (p["shape"] == shape) & (p.precision == prec) & (p.impl == impl) & p.kernel.str.contains(key)]
    return k.cuda_time_us_per_call.sum() if len(k) else float("nan")
def median(b, problem, shape, prec, impl):
    bs = b.batch.astype(str) + "x" + b.in_features.astype(str) + "->" + b.out_features.astype(str)
    r = b[(b.problem.astype(str) == str(problem)) & (bs == shape) & (b.precision == prec) & (b.impl == impl)]
    return 1e3 * r.median_ms.iloc[0] if len(r) else float("nan")
runs = {n: (pd.read_csv(f"{ab}/{n}/bench.csv"), pd.read_csv(f"{ab}/{n}/profile.csv")) for n in ("main", "branch")}
print("train           | fused GEMM | sums GEMM | merges | cuBLAS | row pass | fused fwd | F.linear | GEMM/cuBLAS fwd/F.linear")
shapes = runs["main"][1][["problem", "shape"]].drop_duplicates().itertuples(index=False)
for problem, shape in shapes:
    for prec in ("bf16", "tf32"):
        for name, (b, p) in runs.items():
            f, s = kernel(p, problem, shape, prec, "fused", "gemm_kernel"), kernel(p, problem, shape, prec, "sums", "gemm_kernel")
            c, row = kernel(p, problem, shape, prec, "gemm_only", ""), kernel(p, problem, shape, prec, "fused", "^(?!.*gemm_kernel)")
            mf, ml = median(b, problem, shape, prec, "fused"), median(b, problem, shape, prec, "gemm_only")
            print(f"{problem} {shape[:14]:14s} {prec} {name:6s} | {f:8.1f} | {s:8.1f} | {f - s:6.1f} | {c:6.1f} | {row:7.1f} | {mf:8.1f} | {ml:7.1f} | {f / c:6.3f} {mf / ml:6.3f}")
PY
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
