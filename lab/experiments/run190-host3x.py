"""run190: why a 3xtf32 forward's bench median sits ~110 µs above its kernels (issue 32, item 2).

bench.csv (run182, H200, 84 at 1024 × 8192 → 8192, train, fused): 3xtf32 median 1.279 ms, min
1.167, its kernels 1.194 (profile.csv), host_us 102.7; tf32 host_us 33.2. The bench times a call
between two CUDA events after a 256 MiB flush, so host time past the flush's end leaves the GPU
idle inside the timed region. This measures, for tf32 and 3xtf32 (fused stage, train, no grad,
the bench's protocol): the host time of a call, the GPU's idle gap between the flush's end and the
first kernel of the call, the call's kernels, and torch.profiler's CPU table of the call (which
runtime calls take the host time). Prints the tables; writes $OUT/run190-host3x.log.
"""
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

out = open(os.path.join(os.environ.get("OUT", "."), "run190-host3x.log"), "w")


def say(*a):
    print(*a)
    print(*a, file=out, flush=True)


ref = make_reference("84", 8192, 8192, seed=0).cuda()
x = torch.randn(1024, 8192, device="cuda")
flush = torch.empty(256 << 18, device="cuda")  # 256 MiB, as fusedlib.lab.timing
summary = []
for precision in ("tf32", "3xtf32"):
    module = from_reference(ref, stage="fused", precision=precision).cuda().train()
    with torch.no_grad():
        for _ in range(10):
            module(x)
        torch.cuda.synchronize()
        host, gpu = [], []
        for _ in range(60):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t = time.perf_counter()
            module(x)
            host.append((time.perf_counter() - t) * 1e6)
            end.record()
            torch.cuda.synchronize()
            gpu.append(start.elapsed_time(end) * 1e3)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                flush.zero_()
                module(x)
                torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    def is_flush(e):  # the 256 MiB fill (tens of µs), not a small fill inside the call
        return "fill" in e.name.lower() and e.time_range.end - e.time_range.start > 20

    gaps, call_us = [], []
    for i, e in enumerate(kernels):  # the flush's kernel, then the call's kernels up to the next flush
        if not is_flush(e) or i + 1 >= len(kernels):
            continue
        gaps.append(kernels[i + 1].time_range.start - e.time_range.end)
        j = i + 1
        while j < len(kernels) and not is_flush(kernels[j]):
            j += 1
        call_us.append(kernels[j - 1].time_range.end - kernels[i + 1].time_range.start)
    names = sorted({e.name[:70] for e in kernels if not is_flush(e)})
    say(f"== {precision}: host {statistics.median(host):.1f} µs a call (median of 60), events "
        f"{statistics.median(gpu):.1f} µs (min {min(gpu):.1f}), idle after the flush "
        f"{statistics.median(gaps):.1f} µs, first kernel to last {statistics.median(call_us):.1f} µs")
    say("   kernels:", "; ".join(names))
    say(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    summary.append((precision, statistics.median(host), statistics.median(gaps), statistics.median(call_us),
                    statistics.median(gpu)))
say("precision | host µs | GPU idle after flush µs | kernels first→last µs | events µs")
for row in summary:
    say(" | ".join(f"{v:.1f}" if isinstance(v, float) else v for v in row))
