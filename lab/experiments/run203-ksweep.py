"""run203 (one H100 or H200; issue 36): where the bf16 GEMM's time over cuBLAS's goes, by a sweep
of K at 84's other dimensions (batch 1024 and 2048, 8192 features): ours (the naive stage's wgmma
kernel, eval: the GEMM and a bias store) and cuBLAS's (F.linear), device µs from torch.profiler
after an L2 flush. A straight line t = a + b·K per kernel splits the time into a part per K step
(the mainloop: b) and a part per tile (fill, epilogue, tail: a). Prints one table and the fits;
writes $OUT/run203.csv."""
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))
rows = []
for batch in (1024, 2048):
    for k in (1024, 2048, 4096, 8192, 16384):
        torch.manual_seed(0)
        m = from_reference(make_reference("84", k, 8192, seed=0), stage="naive", precision="tf32")
        m = m.to(torch.bfloat16).cuda().eval()
        x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
        w, b = m.gemm.weight.detach(), m.gemm.bias.detach()
        with torch.no_grad():
            for who, fn in (("ours", m), ("cublas", lambda t: F.linear(t, w, b))):
                ker = profile_kernels(fn, x, calls=10)
                gemm = [r for r in ker if ("wgmma_gemm" in r[0] if who == "ours" else ("nvjet" in r[0] or "gemm" in r[0]))]
                us = sum(r[2] for r in gemm)
                rows.append(dict(batch=batch, k=k, who=who, us=us, kernel=gemm[0][0][:70] if gemm else "-"))
                print(rows[-1], flush=True)
df = pd.DataFrame(rows)
df.to_csv(OUT / "run203.csv", index=False)
t = df.pivot_table(index=["batch", "k"], columns="who", values="us")
t["ours / cublas"] = t["ours"] / t["cublas"]
print(t.round(2).to_string())
for (batch, who), g in df.groupby(["batch", "who"]):
    b, a = np.polyfit(g.k, g.us, 1)
    print(f"batch {batch} {who:6s}: {a:7.2f} µs + {b * 1024:7.3f} µs per 1024 of K  (per K step of 64: {b * 64:.3f} µs)")
