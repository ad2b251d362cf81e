"""run208 (one H100 or H200; issue 32): the swapped 3xTF32 GEMM (gemm_wgmma.cuh wg_swap: Zᵀ = W Xᵀ
in 128 × 128 tiles, W split by the consumers, X's parts from x_parts_kernel) against the unswapped
one (W split in shared memory, $FUSEDLIB_WGMMA_WSPLIT=smem) at 84's and 33's KernelBench shape,
train mode: the forward of each stage timed interleaved with eager fp32 (fusedlib.lab.timing:
L2 flush, events, rounds), the fused forward's kernels (torch.profiler), and the largest
difference between the two ways' outputs. Issue 32's target: fused forward ≤ 0.42 × eager fp32.
Writes $OUT/run208-swap.csv and $OUT/run208-kernels.csv."""
import contextlib
import copy
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.lab.profiling import profile_kernels
from fusedlib.lab.timing import time_round_robin
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))
VAR = "FUSEDLIB_WGMMA_WSPLIT"


def way(value):
    @contextlib.contextmanager
    def ctx():
        old = os.environ.get(VAR)
        os.environ[VAR] = value
        try:
            yield
        finally:
            if old is None:
                del os.environ[VAR]
            else:
                os.environ[VAR] = old
    return ctx


rows, kernels = [], []
for problem in ("84", "33"):
    torch.manual_seed(0)
    ref = make_reference(problem, 8192, 8192, seed=0).cuda().train()
    x = torch.rand(1024, 8192, device="cuda")
    fns = {"eager fp32": (copy.deepcopy(ref), "fp32")}
    mods = {}
    for stage in ("naive", "sums", "fused"):
        mods[stage] = from_reference(copy.deepcopy(ref), stage=stage, precision="3xtf32").cuda().train()
        for w in ("smem", "swap"):
            fns[f"{stage} {w}"] = (mods[stage], way(w))
    with torch.no_grad():
        outs = {}
        for w in ("smem", "swap"):
            with way(w)():
                outs[w] = mods["fused"](x)
        diff = (outs["swap"] - outs["smem"]).abs().max().item() / outs["smem"].abs().max().item()
        times = time_round_robin(fns, x, iters=100, rounds=5)
        for w in ("smem", "swap"):
            with way(w)():
                for name, calls, us in profile_kernels(mods["fused"], x, calls=10):
                    kernels.append(dict(problem=problem, way=w, kernel=name[:90], calls=calls, us=us))
    eager = times["eager fp32"][0]
    for name, (med, lo, hi, host) in times.items():
        rows.append(dict(problem=problem, impl=name, median_ms=med, min_ms=lo, max_ms=hi,
                         ratio_to_eager=med / eager, fused_rel_diff_swap_smem=diff))
    print(pd.DataFrame([r for r in rows if r["problem"] == problem]).round(4).to_string(index=False), flush=True)
pd.DataFrame(rows).to_csv(OUT / "run208-swap.csv", index=False)
k = pd.DataFrame(kernels)
k.to_csv(OUT / "run208-kernels.csv", index=False)
print(k.pivot_table(index=["problem", "kernel"], columns="way", values="us", aggfunc="sum").round(1).to_string())
