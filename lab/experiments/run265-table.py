"""run265's table (lab/experiments/run265.sh): for each bench call under AB/<name>/ (bench.csv, profile.csv),
train mode, each shape and precision: the fused stage's GEMM kernel, the sums stage's, cuBLAS's, the fused
stage's other kernels (the row pass), the forwards' bench medians, and the fused GEMM and forward over
cuBLAS / F.linear (µs)."""
import sys
from pathlib import Path

import pandas as pd

ab = Path(sys.argv[1])


def kernels(p, problem, shape, prec, impl, pattern):
    k = p[(p.problem.astype(str) == str(problem)) & (p["shape"] == shape) & (p.precision == prec) & (p.impl == impl)
          & p.kernel.str.contains(pattern)]
    return k.cuda_time_us_per_call.sum() if len(k) else float("nan")


def median(b, problem, shape, prec, impl):
    bs = b.batch.astype(str) + "x" + b.in_features.astype(str) + "->" + b.out_features.astype(str)
    r = b[(b.problem.astype(str) == str(problem)) & (bs == shape) & (b.precision == prec) & (b.impl == impl)]
    return 1e3 * r.median_ms.iloc[0] if len(r) else float("nan")


print(f"{'train':28s} | fused GEMM | sums GEMM | cuBLAS | row pass | fused fwd | F.linear | GEMM/cuBLAS fwd/F.linear")
for d in sorted(p for p in ab.iterdir() if (p / "profile.csv").exists()):
    b, p = pd.read_csv(d / "bench.csv"), pd.read_csv(d / "profile.csv")
    for problem, shape in p[["problem", "shape"]].drop_duplicates().itertuples(index=False):
        for prec in ("bf16", "tf32"):
            f, s = kernels(p, problem, shape, prec, "fused", "gemm_kernel"), kernels(p, problem, shape, prec, "sums", "gemm_kernel")
            c, row = kernels(p, problem, shape, prec, "gemm_only", ""), kernels(p, problem, shape, prec, "fused", "^(?!.*gemm_kernel)")
            mf, ml = median(b, problem, shape, prec, "fused"), median(b, problem, shape, prec, "gemm_only")
            print(f"{d.name:6s} {problem} {shape[:14]:14s} {prec} | {f:10.1f} | {s:9.1f} | {c:6.1f} | {row:8.1f} | "
                  f"{mf:9.1f} | {ml:8.1f} | {f / c:6.3f} {mf / ml:6.3f}")
