"""run233 (see run233.sh): the package's bf16 fused and sums stages, train mode, against cuBLAS's GEMM
alone at the presets: each forward's kernels profiled (three rounds, median), with the GEMM's
share. run232's copy put the fused forward at 839 / 209 / 202 µs at 39 / 84 / 33 against the
previous package's 886 / 214 / 208 and cuBLAS's GEMM's 676 / 169 / 169. Writes $OUT/run233-kernels.csv."""
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

from ab import kernel_rounds  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))


@torch.no_grad()
def main() -> None:
    rows = []
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
        x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=torch.bfloat16)
        w, b = ref.gemm.weight.cuda().bfloat16(), ref.gemm.bias.cuda().bfloat16()
        calls = {s: from_reference(ref, stage=s, precision="tf32").cuda().train().to(torch.bfloat16)
                 for s in ("sums", "fused")}
        calls["cuBLAS"] = lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)
        rows += kernel_rounds(calls, x, problem=problem)
    k = pd.DataFrame(rows)
    k.to_csv(OUT / "run233-kernels.csv", index=False)
    med = k.groupby(["problem", "variant"], sort=False)[["gemm_us", "total_us"]].median().unstack(0)
    cub = med["total_us"].loc["cuBLAS"]
    print(med.round(1).to_string())
    print("forward / cuBLAS:", (med["total_us"] / cub).round(3).to_string())


if __name__ == "__main__":
    main()
