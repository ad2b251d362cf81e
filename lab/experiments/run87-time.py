"""run87: GPU kernel time of one forward (torch.profiler: the sum of its kernels' device times,
median of 20 calls after 3) at KernelBench v0 (128×1024→512) and 84's KernelBench shape, for
the sums and fused stages in tf32 and 3xtf32, train and eval; argv[1] labels the build.
Run with PYTHONPATH at a copy of the repository."""
import statistics
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

label = sys.argv[1]
for problem, shape in (("84", "v0"), ("33", "v0"), ("84", "84")):
    sh = PRESETS[shape]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    for precision in ("tf32", "3xtf32"):
        for mode in ("train", "eval"):
            out = []
            for stage in ("sums", "fused"):
                m = fusedlib.from_reference(ref, stage=stage, precision=precision).train(mode == "train")
                with torch.no_grad():
                    for _ in range(3):
                        m(x)
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(20):
                            m(x)
                            torch.cuda.synchronize()
                by = defaultdict(list)
                for e in prof.events():
                    if e.device_time > 0:
                        by[e.name].append(e.device_time)
                total = sum(statistics.median(v) for v in by.values())
                gemm = sum(statistics.median(v) for k, v in by.items() if "gemm" in k)
                out.append(f"{stage} {total:7.1f} (gemm {gemm:6.1f})")
            print(f"{label:8s} {problem} {shape:3s} {precision:6s} {mode:5s}  " + "  ".join(out), flush=True)
