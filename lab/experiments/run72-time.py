"""run72: the wgmma GEMM kernel's time (torch.profiler) in each stage's train forward at 84's
KernelBench shape, tf32 and 3xtf32, and cuBLAS TF32 (F.linear), measured round-robin: 5
rounds, each timing 20 calls of every implementation in a rotated order (so that clock changes
under the tensor cores' power draw fall on all alike); prints the median over rounds (µs).
argv[1] labels the build; $FUSEDLIB_WGMMA_GRID caps the grid."""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

label = sys.argv[1]
sh = PRESETS["84"]
ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.rand(sh.batch, sh.in_features, device="cuda")


def cublas(x):
    torch.backends.cuda.matmul.allow_tf32 = True
    y = torch.nn.functional.linear(x, ref.gemm.weight)
    torch.backends.cuda.matmul.allow_tf32 = False
    return y


impls = {"cuBLAS": cublas}
for precision in ("tf32", "3xtf32"):
    for stage in ("naive", "sums", "fused"):
        impls[f"{precision} {stage}"] = fusedlib.from_reference(ref, stage=stage, precision=precision).train()
times = {k: [] for k in impls}
names = list(impls)
with torch.no_grad():
    for f in impls.values():
        f(x)
    for rnd in range(5):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            for _ in range(3):
                impls[name](x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    impls[name](x)
                torch.cuda.synchronize()
            ts = [e.device_time for e in prof.events() if "gemm" in e.name.lower() or "sm90" in e.name]
            times[name].append(statistics.median(ts))
print(f"{label:16s} " + "  ".join(f"{k} {statistics.median(v):7.1f}" for k, v in times.items()), flush=True)
