"""run92: is the 3xTF32 GEMM's train-mode time at 84 (run91: 1101 µs shifted against 1031 in eval)
the shift's code or its data? The naive stage at 84's KernelBench shape, train against eval, on
X = rand (the shift changes the data the tensor cores see) and on the same X with row 0 zeroed
(x₀ = 0: the shifted operand equals X bit for bit, so only the code differs). torch.profiler
device time of the GEMM kernel, median of 4 rounds of 6 calls per mode, interleaved."""
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

sh = PRESETS["84"]
ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.rand(sh.batch, sh.in_features, device="cuda")
x_zero0 = x.clone()
x_zero0[0] = 0
for precision in ("3xtf32", "fp32"):
    m = fusedlib.from_reference(ref, stage="naive", precision=precision)
    times = defaultdict(list)
    with torch.no_grad():
        for _ in range(2):
            m(x)
        for _ in range(4):
            for name, inp in (("X", x), ("x0=0", x_zero0)):
                for mode in ("train", "eval"):
                    m.train(mode == "train")
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(6 if precision == "3xtf32" else 3):
                            m(inp)
                            torch.cuda.synchronize()
                    times[name, mode] += [e.device_time for e in prof.events()
                                          if e.device_time > 0 and "gemm" in e.name.split("<")[0]]
    print(precision, "  ".join(f"{n} {md} {statistics.median(v):7.1f}" for (n, md), v in times.items()), "(us)",
          flush=True)
