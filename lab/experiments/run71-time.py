"""run71: the wgmma GEMM kernel's time (torch.profiler, median of 10 calls after 3) in each
stage's train forward at 84's KernelBench shape, tf32 and 3xtf32, beside cuBLAS TF32 (F.linear)
in the same process. argv[1] labels the build; $FUSEDLIB_WGMMA_GRID caps the grid."""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

label = sys.argv[1]
problems = sys.argv[2].split(",") if len(sys.argv) > 2 else ["84"]


def gemm_us(fn, x, calls=10):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(x)
            torch.cuda.synchronize()
    ts = [e.device_time for e in prof.events() if "gemm" in e.name.lower() or "sm90" in e.name]
    return statistics.median(ts) if ts else float("nan")


for problem in problems:
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    cub = gemm_us(lambda x: torch.nn.functional.linear(x, ref.gemm.weight), x)
    torch.backends.cuda.matmul.allow_tf32 = False
    cells = []
    for precision in ("tf32", "3xtf32"):
        for stage in ("naive", "sums", "fused"):
            mod = fusedlib.from_reference(ref, stage=stage, precision=precision).train()
            cells.append(f"{stage[:5]} {gemm_us(mod, x):7.1f}")
    print(f"{label:14s} {problem} cuBLAS-tf32 {cub:6.1f} | tf32: {' '.join(cells[:3])} | 3xtf32: {' '.join(cells[3:])}",
          flush=True)
