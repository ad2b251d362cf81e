"""run248 (branch eval16): the eval forward of 39 and 33 in bf16 at their KernelBench shapes, the
fused and sums stages against cuBLAS's GEMM alone (F.linear), timed by the package's protocol
(fusedlib.lab.timing: CUDA events, the L2 flushed before each call); prints a table (µs)."""
import torch
import torch.nn.functional as F

import fusedlib
from fusedlib.lab import bench
from fusedlib.lab.timing import time_cuda
from fusedlib.reference import PRESETS, make_reference

rows = []
for problem in ("39", "33"):
    shape = PRESETS[problem]
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=0)
    x = bench.bench_input(shape, 0).cuda().to(torch.bfloat16)
    for stage in ("fused", "sums"):
        module = fusedlib.from_reference(ref, stage=stage, precision="tf32").cuda().eval().to(torch.bfloat16)
        with torch.no_grad():
            ms = time_cuda(lambda x: module(x), x)[0]
        rows.append((problem, stage, 1000 * ms))
    w = ref.gemm.weight.detach().cuda().to(torch.bfloat16)
    b = ref.gemm.bias.detach().cuda().to(torch.bfloat16)
    rows.append((problem, "F.linear", 1000 * time_cuda(lambda x: F.linear(x, w, b), x)[0]))
for problem, impl, us in rows:
    print(f"{problem:>4} {impl:<9} {us:8.1f} us")
