"""run213 (prepared; one H100 or H200; issue 32), on branch `fence-first`: does counting a tile
before storing its Z′ close the fused GEMM's gap to the sums GEMM?

run212's profile.csv (H200, train, KernelBench shapes) puts the fused stage's GEMM, whose epilogue
merges, above the sums stage's GEMM plus its separate finalize kernel at almost every shape: 3xtf32
+14 µs at 84, +24 at 33, +43 at 39; fp32 +19 at 84, +115 at 39; bf16 +6 at 84. Every epilogue
thread fenced (__threadfence) before its tile was counted, after storing its share of the tile's Z′,
so each fence could wait until those stores completed; the sums GEMM does not fence. (run207's
single fence in thread 0 after the barrier gained nothing at bf16: a cumulative fence still covers
the stores.) On `fence-first` the merging epilogues compute the partials, fence and count first and
store Z′ after (the statistics come from registers or the C tile, not from Z′; nothing in the
kernel reads Z′), except the BN = 256 kernels (tf32, 16-bit), where ptxas spills with that order.

For 84, 33 and 39 at their KernelBench shapes in train mode, fp32, tf32, 3xtf32 and bf16, this
profiles (fusedlib.lab.profiling: 10 calls after an L2 flush each, 3 for fp32 at 39) the sums and
fused stages' forwards and prints the fused GEMM's excess over the sums GEMM plus finalize, beside
the same excess in the committed profile.csv (before the change). Checks first that the two stages'
running buffers after one forward from the same state are bit-identical (the merge order is the
same in every stage; the change moves where the merge runs, not what it computes). Writes
$OUT/run213-gap.csv."""
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))
SHAPES = {84: (1024, 8192, 8192), 33: (1024, 8192, 8192), 39: (16384, 4096, 4096)}
PRECISIONS = ("3xtf32", "fp32", "tf32", "bf16")


def module(ref, stage: str, precision: str):
    mod = from_reference(ref, stage=stage, precision="tf32" if precision == "bf16" else precision).cuda().train()
    return mod.to(torch.bfloat16) if precision == "bf16" else mod


def before() -> pd.DataFrame:
    """The committed profile's fused GEMM, sums GEMM and finalize (µs), train, KernelBench shapes."""
    p = pd.read_csv(Path("results/h200/profile.csv"))
    p = p[(p["mode"] == "train") & p.impl.isin(["sums", "fused"])]
    p = p[p["shape"] == p.problem.map({k: f"{n}x{i}->{m}" for k, (n, i, m) in SHAPES.items()})]
    part = p.kernel.str.contains("gemm").map({True: "gemm", False: None})
    part[p.kernel.str.contains("finalize")] = "finalize"
    p = p.assign(part=part).dropna(subset=["part"])
    return p.pivot_table(index=["problem", "precision"], columns=["impl", "part"], values="cuda_time_us_per_call",
                         aggfunc="sum")


def main() -> None:
    rows = []
    for problem, (n, k, m) in SHAPES.items():
        ref = make_reference(str(problem), k, m, seed=0)
        for precision in PRECISIONS:
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            x = torch.randn(n, k, device="cuda", dtype=dtype)
            mods = {stage: module(ref, stage, precision) for stage in ("sums", "fused")}
            with torch.no_grad():
                for mod in mods.values():
                    mod(x)
                same = all(torch.equal(getattr(mods["sums"].bn, b), getattr(mods["fused"].bn, b))
                           for b in ("running_mean", "running_var"))
                row = dict(problem=problem, precision=precision, buffers_bit_identical=same)
                for stage, mod in mods.items():
                    ker = profile_kernels(mod, x, calls=3 if precision == "fp32" and problem == 39 else 10)
                    row[f"{stage}_gemm"] = sum(us for name, _, us in ker if "gemm" in name)
                    row[f"{stage}_finalize"] = sum(us for name, _, us in ker if "finalize" in name)
            row["excess"] = row["fused_gemm"] - row["sums_gemm"] - row["sums_finalize"]
            rows.append(row)
            print(row, flush=True)
    df = pd.DataFrame(rows)
    old = before()
    df["excess_before"] = [old.loc[(r.problem, r.precision), ("fused", "gemm")] -
                           old.loc[(r.problem, r.precision), ("sums", "gemm")] -
                           old.loc[(r.problem, r.precision), ("sums", "finalize")] for r in df.itertuples()]
    df.to_csv(OUT / "run213-gap.csv", index=False)
    print(df.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
