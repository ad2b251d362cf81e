"""run60: kernel time of the engine's SIMT GEMM (the naive stage's fp32 GEMM, torch.profiler,
median of 10 calls after 3) at the KernelBench shapes and 4096³, beside cuBLAS SGEMM
(F.linear's kernel, same protocol). Run with PYTHONPATH at a copy of the repository."""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import make_reference

torch.backends.cuda.matmul.allow_tf32 = False
label = sys.argv[1] if len(sys.argv) > 1 else "engine"


def kernel_ms(fn, x, pattern):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(x)
            torch.cuda.synchronize()
    ts = [e.device_time for e in prof.events() if pattern(e.name)]
    return statistics.median(ts) / 1e3 if ts else float("nan")


for n, k, m in [(1024, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096)]:
    mod = fusedlib.from_reference(make_reference("84", k, m, seed=0).cuda().eval(), stage="naive", precision="fp32")
    x = torch.randn(n, k, device="cuda")
    eng = kernel_ms(mod, x, lambda s: "simt_gemm_kernel" in s)
    w = mod.gemm.weight
    cub = kernel_ms(lambda x: torch.nn.functional.linear(x, w), x, lambda s: "gemm" in s.lower() or "sgemm" in s.lower())
    print(f"{label:28s} {n}x{k}->{m}: engine {eng:.3f} ms  cuBLAS {cub:.3f} ms  ratio {eng / cub:.3f}  "
          f"({2 * n * k * m / eng / 1e9:.1f} TFLOP/s)", flush=True)
