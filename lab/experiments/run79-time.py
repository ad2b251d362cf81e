"""run79: the 3xTF32 wgmma GEMM kernel's time (torch.profiler, µs) in the naive, sums and fused
stages' train forward at several shapes, round-robin (3 rounds of 10 calls each, rotated
order), median over rounds. argv[1] labels the build (its tile width: 168 now, 192 before)."""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import make_reference, parse_shape

label = sys.argv[1]
for shape, problem in (("1024x8192->8192", "84"), ("16384x4096->4096", "39"), ("4096x4096->4096", "84"),
                       ("1024x4096->4096", "84"), ("1024x2048->2048", "84")):
    sh = parse_shape(shape)
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    impls = {s: fusedlib.from_reference(ref, stage=s, precision="3xtf32").train() for s in ("naive", "sums", "fused")}
    times = {k: [] for k in impls}
    names = list(impls)
    with torch.no_grad():
        for rnd in range(3):
            for name in names[rnd:] + names[:rnd]:
                for _ in range(2):
                    impls[name](x)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        impls[name](x)
                    torch.cuda.synchronize()
                times[name].append(statistics.median(e.device_time for e in prof.events() if "wgmma_gemm" in e.name))
    print(f"{label:4s} {shape:18s} " + "  ".join(f"{k} {statistics.median(v):8.1f}" for k, v in times.items()),
          flush=True)
