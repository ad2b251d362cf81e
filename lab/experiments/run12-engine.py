"""run12: first GPU run of the shared GEMM engine. Builds the four stages, checks every
stage x precision x GEMM path on small and odd shapes against float64 (check.run_case, one
or two seeds: a smoke test before the full suite), then times the ladder (train, KernelBench
shapes) for every stage and precision beside eager and the GEMM alone. Writes a CSV to $OUT."""
import os, sys, time, subprocess, json, csv
import torch
from fusedlib import algebra, check, build, engine
from fusedlib.lab.bench import time_cuda, build_impl, peer_precision
from fusedlib.reference import make_reference, parse_shape

out = os.environ.get("OUT", "/tmp")
t0 = time.time()
procs = [subprocess.Popen([sys.executable, "-c", f"from fusedlib.build import load_stage; load_stage('{s}')"])
         for s in build.STAGE_FILES]
rcs = [p.wait() for p in procs]
print(f"build {time.time() - t0:.0f} s rcs={rcs}", flush=True)

fails, n = [], 0
t1 = time.time()
for path in ("auto", "mma"):
    os.environ[engine.ENV_VAR] = path
    for problem in ("84", "33"):
        for stage in algebra.STAGES:
            for precision in algebra.PRECISIONS:
                if path == "mma" and precision == "fp32":
                    continue
                for mode in ("train", "eval"):
                    shapes = ["v0", "257x1000->999", "2x64->3", "130x70->200"]
                    if precision == "3xtf32" and mode == "train":
                        shapes += ["256x16384->256"] + (["256x16383->256"] if path == "mma" else [])
                    for shape in shapes:
                        for seed in (0, 2):
                            kind = "offset" if seed == 2 else "rand"
                            if precision == "tf32" and kind == "offset":
                                continue
                            try:
                                r = check.run_case(problem, stage, mode, precision, shape, seed, "cuda", kind)
                            except Exception as exc:  # noqa: BLE001
                                r = {"passed": False, "error": repr(exc)[:300]}
                            n += 1
                            if not r["passed"]:
                                fails.append((path, problem, stage, precision, mode, shape, seed,
                                              r.get("rel_err"), r.get("budget"), r.get("error")))
os.environ.pop(engine.ENV_VAR)
print(f"check: {n - len(fails)}/{n} passed in {time.time() - t1:.0f} s", flush=True)
for f in fails[:40]:
    print("FAIL", f)

rows = []
for problem in ("84", "33", "39"):
    sh = parse_shape(problem)
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    for precision in algebra.PRECISIONS:
        impls = list(algebra.STAGES) + (["eager", "gemm_only"] if precision != "3xtf32" else [])
        for impl in impls:
            for path in (["auto", "mma"] if precision != "fp32" and impl == "fused" else ["auto"]):
                os.environ[engine.ENV_VAR] = path
                fn, _ = build_impl(impl, ref, precision)
                with peer_precision(precision if impl in ("eager", "gemm_only") else "fp32"), torch.no_grad():
                    med, lo, hi = time_cuda(fn, x, warmup=5, iters=30 if problem != "39" else 20)
                rows.append(dict(problem=problem, precision=precision, impl=impl, path=path, median_ms=round(med, 4)))
                print(f"{problem:>3} {precision:7s} {impl:10s} {path:5s} {med:8.3f} ms", flush=True)
                os.environ.pop(engine.ENV_VAR)
with open(os.path.join(out, "run12-ladder.csv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
print(f"total {time.time() - t0:.0f} s")
