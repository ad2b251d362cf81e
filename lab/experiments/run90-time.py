"""run90/run91: the first-row shift's cost. The naive stage's kernels, train (X shifted by its
first row at fp32 and 3xTF32: the SIMT GEMM's x₀ loads, the split's subtraction) against eval
(no shift; the same BiasStore GEMM and split kernels) at the KernelBench shapes of 84 and 39;
tf32 (never shifted) as the control. torch.profiler device time per kernel, median of 3 rounds
of 6 train and 6 eval calls interleaved, after 2. Run with PYTHONPATH at a copy of the repository."""
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
    for precision in ("fp32", "3xtf32", "tf32"):
        m = fusedlib.from_reference(ref, stage="naive", precision=precision)
        times = {mode: defaultdict(list) for mode in ("train", "eval")}
        with torch.no_grad():
            for _ in range(2):
                m(x)
            for _ in range(3):
                for mode in ("train", "eval"):
                    m.train(mode == "train")
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(6):
                            m(x)
                            torch.cuda.synchronize()
                    for e in prof.events():
                        for key in ("gemm", "split"):
                            if e.device_time > 0 and key in e.name.split("<")[0]:
                                times[mode][key].append(e.device_time)
        row = "  ".join(f"{mode} gemm {statistics.median(t['gemm']):8.1f} split "
                        f"{statistics.median(t['split']) if t['split'] else 0.0:6.1f}" for mode, t in times.items())
        print(f"{problem} {precision:6s} {row}  (us)", flush=True)
