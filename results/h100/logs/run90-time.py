"""run90: the first-row shift's cost. The naive stage's kernels, train (X shifted by its first
row at fp32 and 3xTF32: the SIMT GEMM's extra x₀ loads, the split's subtraction) against eval
(no shift; the same BiasStore GEMM and split kernels) at the KernelBench shapes of 84 and 39:
torch.profiler device time per kernel, median of 10 calls after 2. Run with PYTHONPATH at a
copy of the repository."""
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

for problem in ("84", "39"):
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    for precision in ("fp32", "3xtf32"):
        for mode in ("train", "eval"):
            m = fusedlib.from_reference(ref, stage="naive", precision=precision).train(mode == "train")
            with torch.no_grad():
                for _ in range(2):
                    m(x)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        m(x)
                        torch.cuda.synchronize()
            by = defaultdict(list)
            for e in prof.events():
                if e.device_time > 0:
                    by[e.name].append(e.device_time)
            parts = {"gemm": 0.0, "split": 0.0}
            for k, v in by.items():
                for key in parts:
                    if key in k.split("<")[0]:
                        parts[key] += statistics.median(v)
            print(f"{problem} {precision:6s} {mode:5s} gemm {parts['gemm']:8.1f} us  split {parts['split']:6.1f} us",
                  flush=True)
