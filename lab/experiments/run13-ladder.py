"""run13: where the stages' time goes with the shared engine. Per-kernel device time of every
stage x precision at 84 and 33 (torch.profiler), then the ladder timed round-robin (each
round times every implementation of a table in turn, so clock and thermal drift fall on all
of them alike), at the three KernelBench shapes, train mode."""
import os, sys, time, subprocess, csv, statistics
import torch
from fusedlib import algebra, build
from fusedlib.lab.bench import build_impl, peer_precision, profile_kernels
from fusedlib.reference import make_reference, parse_shape

out = os.environ.get("OUT", "/tmp")
t0 = time.time()
procs = [subprocess.Popen([sys.executable, "-c", f"from fusedlib.build import load_stage; load_stage('{s}')"])
         for s in build.STAGE_FILES]
print("build rcs", [p.wait() for p in procs], f"{time.time() - t0:.0f} s", flush=True)


def interleaved(fns, x, warmup=5, iters=40, rounds=4, flush_mb=256):
    flush = torch.empty(flush_mb * (1 << 20) // 4, device="cuda")
    for name, (fn, prec) in fns.items():
        with peer_precision(prec), torch.no_grad():
            for _ in range(warmup):
                fn(x)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for name, (fn, prec) in fns.items():
            with peer_precision(prec), torch.no_grad():
                for _ in range(iters // rounds):
                    flush.zero_()
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record(); fn(x); b.record(); torch.cuda.synchronize()
                    times[name].append(a.elapsed_time(b))
    return {k: statistics.median(v) for k, v in times.items()}


prof_rows, rows = [], []
for problem in ("84", "33", "39"):
    sh = parse_shape(problem)
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    for precision in algebra.PRECISIONS:
        fns = {}
        for impl in list(algebra.STAGES) + (["eager", "gemm_only"] if precision != "3xtf32" else []):
            fn, _ = build_impl(impl, ref, precision)
            fns[impl] = (fn, precision if impl in ("eager", "gemm_only") else "fp32")
        if problem != "39":
            for impl, (fn, prec) in fns.items():
                with peer_precision(prec), torch.no_grad():
                    for name, calls, us in profile_kernels(fn, x, calls=3):
                        prof_rows.append(dict(problem=problem, precision=precision, impl=impl, kernel=name[:90],
                                              calls=calls, us=round(us, 1)))
        med = interleaved(fns, x, iters=40 if problem != "39" else 20)
        for impl, ms in med.items():
            rows.append(dict(problem=problem, precision=precision, impl=impl, median_ms=round(ms, 4)))
        print(problem, precision, "  ".join(f"{k} {v:.3f}" for k, v in med.items()), flush=True)
for name, data in (("run13-profile.csv", prof_rows), ("run13-ladder.csv", rows)):
    with open(os.path.join(out, name), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(data[0]))
        w.writeheader(); w.writerows(data)
import pandas as pd
p = pd.DataFrame(prof_rows)
p = p[p.impl.isin(algebra.STAGES)]
p["kernel"] = p.kernel.str.slice(0, 50)
print(p[p.problem == "84"].to_string(index=False))
print(f"total {time.time() - t0:.0f} s")
