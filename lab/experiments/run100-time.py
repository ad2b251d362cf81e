"""run100: the fused stage's merging epilogue with its stores last (branch next) against main's
(stores, partials, fence, count): forward time of the fused and sums stages (train, the bench's
protocol: 256 MB L2 flush, CUDA events, median of 60 calls after 5) and their GEMM kernels alone
(torch.profiler, median of 10 calls), at the KernelBench shapes. Run once per variant, in turn,
with PYTHONPATH at that variant's tree; argv[1] names the variant."""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

label = sys.argv[1]
flush = torch.empty(256 << 18, device="cuda")


def forward_ms(m, x, iters=60):
    ts = []
    for i in range(iters + 5):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        m(x)
        b.record()
        torch.cuda.synchronize()
        if i >= 5:
            ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def gemm_us(m, x):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            m(x)
        torch.cuda.synchronize()
    ts = [e.device_time for e in prof.events() if "gemm" in e.name.lower()]
    return statistics.median(ts)


torch.manual_seed(0)
for shape, problem, precisions in (("84", "84", ("tf32", "3xtf32", "fp32")), ("33", "33", ("tf32",)),
                                   ("39", "33", ("tf32", "3xtf32", "fp32"))):
    s = PRESETS[shape]
    ref = make_reference(problem, s.in_features, s.out_features, seed=0).cuda()
    x = torch.rand(s.batch, s.in_features, device="cuda")
    for precision in precisions:
        row = []
        with torch.no_grad():
            for stage in ("sums", "fused"):
                m = fusedlib.from_reference(ref, stage=stage, precision=precision)
                m(x)
                row += [forward_ms(m, x), gemm_us(m, x)]
        print(f"{label:6s} {shape} {precision:6s} train: sums {row[0]:.3f} ms (GEMM {row[1]:.1f} µs)  "
              f"fused {row[2]:.3f} ms (GEMM {row[3]:.1f} µs)  fused/sums {row[2] / row[0]:.3f}", flush=True)
