"""run213 (prepared; one H100 or H200; issue 32), on branch `fence-first`: does computing a tile's
statistics, fencing and counting it before storing its Z′ close the fused GEMM's gap to the sums
GEMM?

run212's profile.csv (H200, train, KernelBench shapes) puts the fused stage's GEMM, whose epilogue
merges, above the sums stage's GEMM plus its separate finalize kernel at almost every shape: 3xtf32
+14 µs at 84, +24 at 33, +43 at 39; fp32 +19 at 84, +115 at 39; bf16 +6 at 84, +12 at 39. Every
epilogue thread fenced (__threadfence) before its tile was counted, after storing its share of the
tile's Z′, so each fence could wait until those stores completed; the sums GEMM does not fence.
(run207's single fence in thread 0 after the barrier gained nothing at bf16: a cumulative fence
still covers the stores.) On `fence-first` every statistics epilogue computes its partials first
(the thread's column values summed 32 at a time, so that BN = 256 does not spill), the merging ones
then fence and count, and Z′ is stored after (nothing in the kernel reads Z′).

"before" is a copy of the kernels with main's epilogue.cuh (run213-before.patch applied to a copy:
fusedlib.build.copy_kernels), "after" the package's. For 84, 33 and 39 at their KernelBench shapes in
train mode, fp32, tf32, 3xtf32 and bf16, each through its extension's eager_forward (not the
dispatcher, where the last extension loaded would answer for both): first Y and the running buffers
of before and after, from the same state, must be bit-identical (the change moves no arithmetic),
then the GEMM and finalize kernels are profiled (fusedlib.lab.profiling: 10 calls after an L2 flush
each, 3 for fp32 at 39). Prints the fused GEMM's excess over the sums GEMM plus finalize, before and
after. Writes $OUT/run213-gap.csv."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

from ab import eager_call, forward_keeping_buffers  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
BEFORE = Path("build/run213-before")
PATCH = Path(__file__).with_name("run213-before.patch")
SHAPES = {84: (1024, 8192, 8192), 33: (1024, 8192, 8192), 39: (16384, 4096, 4096)}
PRECISIONS = ("3xtf32", "fp32", "tf32", "bf16")


def before_kernels() -> Path:
    """A copy of the kernels with main's epilogue.cuh."""
    copy_kernels(BEFORE)
    with PATCH.open() as patch:
        done = subprocess.run(["patch", "-p3", "-s", "--forward", "-d", str(BEFORE)], stdin=patch)
    if done.returncode:
        raise SystemExit("run213-before.patch does not apply: run213 runs on branch fence-first")
    return BEFORE


def main() -> None:
    ext = {(stage, when): load_stage(stage, 0, BEFORE if when == "before" else None)
           for stage in ("sums", "fused") for when in ("before", "after")}
    rows = []
    for problem, (n, k, m) in SHAPES.items():
        ref = make_reference(str(problem), k, m, seed=0)
        for precision in PRECISIONS:
            bf16 = precision == "bf16"
            mod = from_reference(ref, stage="fused", precision="tf32" if bf16 else precision).cuda().train()
            if bf16:
                mod = mod.to(torch.bfloat16)
            x = torch.randn(n, k, device="cuda", dtype=mod._tensors()[0].dtype)
            row = dict(problem=problem, precision=precision)
            with torch.no_grad():
                for stage in ("sums", "fused"):
                    calls = {when: eager_call(ext[stage, when], mod, "tf32" if bf16 else precision)
                             for when in ("before", "after")}
                    out = {when: forward_keeping_buffers(call, x, mod.bn) for when, call in calls.items()}
                    row[f"{stage}_bit_identical"] = all(torch.equal(a, b) for a, b in zip(out["before"], out["after"]))
                    for when, call in calls.items():
                        ker = profile_kernels(call, x, calls=3 if precision == "fp32" and problem == 39 else 10)
                        row[f"{stage}_gemm_{when}"] = sum(us for name, _, us in ker if "gemm" in name)
                        row[f"{stage}_finalize_{when}"] = sum(us for name, _, us in ker if "finalize" in name)
            for when in ("before", "after"):
                row[f"excess_{when}"] = (row[f"fused_gemm_{when}"] - row[f"sums_gemm_{when}"]
                                         - row[f"sums_finalize_{when}"])
            rows.append(row)
            print(row, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run213-gap.csv", index=False)
    cols = ["problem", "precision", "sums_bit_identical", "fused_bit_identical", "sums_gemm_before",
            "sums_gemm_after", "fused_gemm_before", "fused_gemm_after", "excess_before", "excess_after"]
    print(df[cols].round(1).to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:] == ["copy"]:
        before_kernels()
    else:
        main()
