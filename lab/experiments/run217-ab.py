"""run217 (one H100 or H200; issue 32), on branch `fence-first`: before against after, interleaved.

run213 profiled each variant's kernels in turn (10 calls after an L2 flush each) and its 3xTF32
GEMM at 39 moved by up to 95 µs between two profiles of the same kernel (4075.6 and 4170.6 µs):
more than the effect sought. Here the variants and eager fp32 are timed in rounds
(fusedlib.lab.timing.time_round_robin: every implementation in turn for its share of the calls, an
L2 flush before each), so that the GPU's clock drift falls on all alike, and issue 32's quantity is
read directly: the fused forward's time over eager fp32's (≤ 0.42), before and after. The sums stage
(its GEMM, the separate finalize kernel, the same row pass) is timed beside it, before and after.

"before" is run213's copy of the kernels with main's epilogue.cuh (built by run213.sh; carried in
the build cache), "after" the package's. Train mode, KernelBench shapes. Writes $OUT/run217-ab.csv."""
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import load_stage
from fusedlib.lab.timing import time_round_robin
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

from ab import eager_call  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
BEFORE = Path("build/run213-before")
SHAPES = {84: (1024, 8192, 8192), 33: (1024, 8192, 8192), 39: (16384, 4096, 4096)}
CASES = [(39, "3xtf32"), (84, "3xtf32"), (33, "3xtf32"), (39, "tf32"), (39, "bf16"), (84, "bf16"), (84, "tf32")]


def main() -> None:
    ext = {(stage, when): load_stage(stage, 0, BEFORE if when == "before" else None)
           for stage in ("sums", "fused") for when in ("before", "after")}
    rows = []
    for problem, precision in CASES:
        n, k, m = SHAPES[problem]
        ref = make_reference(str(problem), k, m, seed=0)
        bf16 = precision == "bf16"
        mod = from_reference(ref, stage="fused", precision="tf32" if bf16 else precision).cuda().train()
        if bf16:
            mod = mod.to(torch.bfloat16)
        eager = ref.cuda().train().to(torch.bfloat16 if bf16 else torch.float32)
        x = torch.rand(n, k, device="cuda", dtype=mod._tensors()[0].dtype)
        fns = {f"{stage}_{when}": (eager_call(ext[stage, when], mod, "tf32" if bf16 else precision), None)
               for stage in ("fused", "sums") for when in ("before", "after")}
        fns["eager"] = (eager, "fp32")
        heavy = problem == 39 and precision != "bf16"
        with torch.no_grad():
            t = time_round_robin(fns, x, warmup=3, iters=40 if heavy else 200, rounds=8 if heavy else 20)
        row = dict(problem=problem, precision=precision, **{name: v[0] for name, v in t.items()})
        for name in fns:
            if name != "eager":
                row[f"{name}/eager"] = row[name] / row["eager"]
        rows.append(row)
        print(row, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run217-ab.csv", index=False)
    cols = ["problem", "precision", "eager", "fused_before", "fused_after", "sums_before", "sums_after",
            "fused_before/eager", "fused_after/eager", "sums_after/eager"]
    print(df[cols].round(4).to_string(index=False))


if __name__ == "__main__":
    main()
