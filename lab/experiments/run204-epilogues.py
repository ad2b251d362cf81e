"""run204 (one H100 or H200; issue 36), after run203's K sweep (the bf16 mainloop at cuBLAS's rate,
the gap all in the part paid once a tile): what that part is made of. The same line t = a + b·K at
batch 1024 and 8192 features, K from 2048 to 16384, for
  cublas bf16   F.linear's GEMM, Z in bf16 (the gemm_only peer)
  cublas fp32   torch.mm with out_dtype=float32: cuBLAS's GEMM storing Z in float32, as ours does
  naive eval    our wgmma kernel with the bias store (Z′ fp32)
  sums train    our wgmma kernel with the column statistics' partials
  fused train   our wgmma kernel with the partials and the merge units
If cuBLAS's a grows to ours with a float32 Z, the store's width is the gap (issue 36's budget
item 2: Z′ in the module's dtype); if not, the epilogue's structure is. Writes $OUT/run204.csv."""
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
batch, m = 1024, 8192
for k in (2048, 4096, 8192, 16384):
    ref = make_reference("84", k, m, seed=0)
    x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    w = ref.gemm.weight.detach().to("cuda", torch.bfloat16)
    cases = [("cublas bf16", lambda t: F.linear(t, w), ("nvjet", "gemm")),
             ("cublas fp32", lambda t: torch.mm(t, w.t(), out_dtype=torch.float32), ("nvjet", "gemm"))]
    for stage, mode in (("naive", "eval"), ("sums", "train"), ("fused", "train")):
        mod = from_reference(ref, stage=stage, precision="tf32").to(torch.bfloat16).cuda()
        mod.train(mode == "train")
        cases.append((f"{stage} {mode}", mod, ("wgmma_gemm",)))
    with torch.no_grad():
        for who, fn, keys in cases:
            try:
                ker = profile_kernels(fn, x, calls=10)
            except Exception as e:  # (out_dtype needs torch ≥ 2.9)
                print(who, "failed:", str(e)[:200])
                continue
            gemm = [r for r in ker if any(s in r[0] for s in keys)]
            rows.append(dict(k=k, who=who, us=sum(r[2] for r in gemm), kernel=gemm[0][0][:80] if gemm else "-"))
            print(rows[-1], flush=True)
df = pd.DataFrame(rows)
df.to_csv(OUT / "run204.csv", index=False)
print(df.pivot_table(index="k", columns="who", values="us").round(1).to_string())
for who, g in df.groupby("who"):
    b, a = np.polyfit(g.k, g.us, 1)
    print(f"{who:12s}: a = {a:6.2f} µs, b = {b * 1024:7.3f} µs per 1024 of K")
