"""run127: why the harness times 39's fused 3xtf32 forward 11 % above the sum of its profiled
kernels (run123: 4.784 ms median against 4104.7 + 185.2 µs). The same forward (and eager fp32)
timed three ways in one process while nvidia-smi samples the SM clock and power every 50 ms:
back to back (CUDA events, no flush, as torch.profiler sees it), the harness's protocol
(bench.time_cuda: 256 MiB L2 flush, events, a synchronize after each call), and torch.profiler's
kernel times. Prints each phase's median ms and the mean SM clock and power over the phase."""
import copy
import csv
import os
import subprocess
import time

import torch

import fusedlib
from fusedlib.lab import bench
from fusedlib.reference import PRESETS, make_reference

out = os.environ.get("OUT", ".")
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                        "--format=csv,noheader,nounits", "-lms", "50"], stdout=open(f"{out}/smi.csv", "w"))
sh = PRESETS["39"]
ref = make_reference("39", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.randn(sh.batch, sh.in_features, device="cuda")
impls = {"fused 3xtf32": fusedlib.from_reference(copy.deepcopy(ref), stage="fused", precision="3xtf32"),
         "fused tf32": fusedlib.from_reference(copy.deepcopy(ref), stage="fused", precision="tf32"),
         "eager fp32": copy.deepcopy(ref)}
phases = []


def back_to_back(fn, n=40):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    ev[0].record()
    for i in range(n):
        fn(x)
        ev[i + 1].record()
    torch.cuda.synchronize()
    t = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(n))
    return t[n // 2]


time.sleep(1.0)
with torch.no_grad():
    for name, m in impls.items():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        for proto in ("back-to-back", "harness", "back-to-back again"):
            t0 = time.time()
            med = back_to_back(m) if proto != "harness" else bench.time_cuda(m, x, warmup=5, iters=60)[0]
            phases.append((name, proto, med, t0, time.time()))
            time.sleep(0.5)
time.sleep(0.5)
smi.terminate()
smi.wait()
samples = []
for row in csv.reader(open(f"{out}/smi.csv")):
    try:
        ts = time.mktime(time.strptime(row[0].strip().split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + row[0].split(".")[1])
        samples.append((ts, float(row[1]), float(row[2]), row[4].strip()))
    except (ValueError, IndexError):
        pass
print(f"{'impl':13} {'protocol':19} {'median ms':>9} {'SM MHz':>7} {'power W':>8} samples reasons")
for name, proto, med, t0, t1 in phases:
    s = [v for v in samples if t0 <= v[0] <= t1]
    mhz = sum(v[1] for v in s) / len(s) if s else float("nan")
    w = sum(v[2] for v in s) / len(s) if s else float("nan")
    print(f"{name:13} {proto:19} {med:9.3f} {mhz:7.0f} {w:8.0f} {len(s):7} {sorted(set(v[3] for v in s))}")
