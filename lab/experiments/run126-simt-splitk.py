"""run126: split-K on the SIMT GEMM (fp32 at KernelBench v0, 128×1024→512: 64 tiles of 32×32).

In one process: the fused forward of 84 and 33 (train, eval) at v0, fp32, with the split count
forced through $FUSEDLIB_SIMT_SPLITK (1 = the previous kernel's schedule; the default plan picks
8), against F.linear (cuBLAS SGEMM) and the eager reference, timed round-robin by the harness's
protocol (fusedlib.lab.bench.time_round_robin: L2 flush, CUDA events, 400 calls in 10 rounds), and
the GEMM kernel alone by torch.profiler. Before timing, each split count's output is compared
with float64 (check.run_case's measure) and with S = 1's. Prints a table; writes run126.csv to $OUT.
Run from the repository root with PYTHONPATH=. and the build cache in $FUSEDLIB_CACHE."""
import copy
import csv
import os
import sys

import torch
import torch.nn.functional as F

import fusedlib
from fusedlib.lab import bench
from fusedlib.reference import PRESETS, make_reference

SPLITS = ["1", "2", "4", "8", "16"]
out_dir = os.environ.get("OUT", ".")
shape = PRESETS["v0"]
rows = []


def set_splits(s):
    os.environ["FUSEDLIB_SIMT_SPLITK"] = s


def kernel_us(fn, x, n=50):
    """Mean device time of the fused GEMM kernel over n calls (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn(x)
        torch.cuda.synchronize()
    gemm = [e for e in prof.key_averages() if "simt_gemm_kernel" in e.key]
    return sum(e.device_time_total for e in gemm) / n if gemm else float("nan")


for problem in ("84", "33"):
    for mode in ("train", "eval"):
        torch.manual_seed(0)
        ref = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda()
        x = torch.randn(shape.batch, shape.in_features, device="cuda")
        fused = fusedlib.from_reference(copy.deepcopy(ref), stage="fused", precision="fp32").train(mode == "train")
        ref64 = copy.deepcopy(ref).double().train(mode == "train")
        with torch.no_grad():
            y64 = ref64(x.double())
            outs = {}
            for s in SPLITS:
                set_splits(s)
                f = copy.deepcopy(fused)
                outs[s] = f(x)
        errs = {s: ((outs[s].double() - y64).norm() / y64.norm()).item() for s in SPLITS}
        same = {s: torch.equal(outs[s], outs["1"]) for s in SPLITS}
        eager = copy.deepcopy(ref).train(mode == "train")

        def run_with(s):
            def fn(x):
                set_splits(s)
                with torch.no_grad():
                    return fused(x)
            return fn

        fns = {f"S={s}": (run_with(s), None) for s in SPLITS}
        fns["gemm_only"] = (lambda x: F.linear(x, ref.gemm.weight, ref.gemm.bias), "fp32")
        fns["eager"] = (lambda x: eager(x), "fp32")
        with torch.no_grad():
            t = bench.time_round_robin(fns, x, warmup=20, iters=400, rounds=10)
        kus = {s: kernel_us(run_with(s), x) for s in SPLITS}
        for name, (med, lo, hi, host) in t.items():
            s = name[2:] if name.startswith("S=") else ""
            rows.append(dict(problem=problem, mode=mode, impl=name, median_ms=med, min_ms=lo, max_ms=hi, host_us=host,
                             gemm_kernel_us=kus.get(s, ""), rel_err=errs.get(s, ""), same_as_S1=same.get(s, "")))
        print(f"{problem} {mode}: " + ", ".join(f"{k} {v[0] * 1e3:.1f} µs" for k, v in t.items()), flush=True)

with open(os.path.join(out_dir, "run126.csv"), "w", newline="") as fh:
    wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
    wr.writeheader()
    wr.writerows(rows)
print(f"{'problem':7} {'mode':5} {'impl':10} {'median µs':>9} {'min µs':>7} {'host µs':>7} {'GEMM µs':>8} {'rel_err':>8} same")
for r in rows:
    g = f"{r['gemm_kernel_us']:.1f}" if r["gemm_kernel_us"] != "" else ""
    e = f"{r['rel_err']:.1e}" if r["rel_err"] != "" else ""
    print(f"{r['problem']:7} {r['mode']:5} {r['impl']:10} {r['median_ms'] * 1e3:9.1f} {r['min_ms'] * 1e3:7.1f} "
          f"{r['host_us']:7.1f} {g:>8} {e:>8} {r['same_as_S1']}")
