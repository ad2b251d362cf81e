"""run70: kernel times of the fused stage's forward (train, torch.profiler, median of 10 calls
after 3) at the KernelBench shapes of 84 and 39, split into the GEMM, the 3xTF32 split and the
row pass, beside cuBLAS (F.linear: TF32 for tf32, fp32 for 3xtf32) in the same process. Run
with PYTHONPATH at a copy of the repository; argv[1] labels the kernels measured."""
import statistics
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

label = sys.argv[1] if len(sys.argv) > 1 else "engine"


def kernel_us(fn, x, calls=10):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(x)
            torch.cuda.synchronize()
    by = defaultdict(list)
    for e in prof.events():
        if e.device_time > 0:
            name = e.name
            key = ("gemm" if "gemm" in name.lower() or "sm90" in name or "cutlass" in name else
                   "split" if "split_tf32" in name else "rows" if "rows" in name or "affine" in name else name[:30])
            by[key].append(e.device_time)
    return {k: statistics.median(v) for k, v in by.items() if len(v) >= calls}


for problem in ("84", "39"):
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    for precision in ("tf32", "3xtf32"):
        mod = fusedlib.from_reference(ref, stage="fused", precision=precision).train()
        t = kernel_us(mod, x)
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        w = ref.gemm.weight
        cub = kernel_us(lambda x: torch.nn.functional.linear(x, w), x).get("gemm", float("nan"))
        torch.backends.cuda.matmul.allow_tf32 = False
        total = sum(t.values())
        parts = "  ".join(f"{k} {v:7.1f}" for k, v in sorted(t.items()))
        print(f"{label:6s} {problem} {str(sh):18s} {precision:6s} fused {total:7.1f} us  [{parts}]  "
              f"cuBLAS {'tf32' if precision == 'tf32' else 'fp32'} {cub:7.1f}  gemm/cuBLAS "
              f"{t.get('gemm', float('nan')) / cub:.3f}", flush=True)
