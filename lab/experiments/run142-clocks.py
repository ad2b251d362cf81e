"""run142: is the tf32 GEMM's gap to cuBLAS (profile.csv at 84: the fold stage's plain-store wgmma GEMM
343 µs, cuBLAS 329 µs) cycles or clock? run141's Nsight Compute counted the same elapsed cycles for both
(563.5 k) at different SM clocks (1.61 against 1.67 GHz). Here, at 84's shape: the fold stage's tf32
forward (train; its GEMM `wgmma_gemm_kernel<256, false, BiasStore>`), the fused stage's and cuBLAS's
TF32 `F.linear`, each in phases of back-to-back calls (A B C A B C) while nvidia-smi samples the SM
clock, power and throttle reasons every 20 ms; torch.profiler's GEMM kernel times in each phase. Prints
each phase's kernel median µs, mean SM MHz and W, and the kernel time scaled to 1980 MHz."""
import copy
import csv
import os
import statistics
import subprocess
import time

import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

out = os.environ.get("OUT", ".")
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                        "--format=csv,noheader,nounits", "-lms", "20"], stdout=open(f"{out}/smi.csv", "w"))
sh = PRESETS["84"]
ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.rand(sh.batch, sh.in_features, device="cuda")
torch.backends.cuda.matmul.allow_tf32 = True
w, b = ref.gemm.weight.detach().clone(), ref.gemm.bias.detach().clone()
impls = {"fold tf32": (fusedlib.from_reference(copy.deepcopy(ref), stage="fold", precision="tf32"), "wgmma_gemm"),
         "fused tf32": (fusedlib.from_reference(copy.deepcopy(ref), stage="fused", precision="tf32"), "wgmma_gemm"),
         "cuBLAS tf32": (lambda x: torch.nn.functional.linear(x, w, b), "sm90_xmma")}
phases = []
time.sleep(1.0)
with torch.no_grad():
    for rnd in range(2):
        for name, (fn, kernel) in impls.items():
            for _ in range(20):
                fn(x)
            torch.cuda.synchronize()
            t0 = time.time()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3000):
                    fn(x)
                torch.cuda.synchronize()
            t1 = time.time()
            ts = [e.device_time for e in prof.events() if kernel in e.name]
            phases.append((name, statistics.median(ts), len(ts), t0, t1))
            time.sleep(0.3)
time.sleep(0.3)
smi.terminate()
smi.wait()
samples = []
for row in csv.reader(open(f"{out}/smi.csv")):
    try:
        ts = time.mktime(time.strptime(row[0].strip().split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + row[0].split(".")[1])
        samples.append((ts, float(row[1]), float(row[2]), float(row[3]), row[4].strip()))
    except (ValueError, IndexError):
        pass
print(f"{'impl':12} {'GEMM µs':>8} {'calls':>6} {'SM MHz':>7} {'W':>5} {'°C':>4} {'µs at 1980':>10} reasons")
for name, med, n, t0, t1 in phases:
    s = [v for v in samples if t0 + 0.2 <= v[0] <= t1]
    mhz = sum(v[1] for v in s) / len(s) if s else float("nan")
    watt = sum(v[2] for v in s) / len(s) if s else float("nan")
    temp = sum(v[3] for v in s) / len(s) if s else float("nan")
    print(f"{name:12} {med:8.1f} {n:6d} {mhz:7.0f} {watt:5.0f} {temp:4.0f} {med * mhz / 1980:10.1f} {sorted(set(v[4] for v in s))}")
