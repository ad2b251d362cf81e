"""run41: the fused backward on the H100 — a correctness smoke test (float64 gradients,
every stage × precision × problem at small odd shapes and the mma path) and the train step
(forward + backward, no optimizer) at the KernelBench shapes: fused stage per precision
against eager PyTorch and torch.compile, CUDA events, median of 20, plus peak memory."""
import copy, os, sys, time, statistics
import torch
import fusedlib
from fusedlib import check, algebra, engine, ops
from fusedlib.reference import PRESETS, make_reference

torch.manual_seed(0)
t0 = time.time()
# ---- correctness smoke
bad = []
n = 0
for problem in ("84", "33"):
    for stage in algebra.STAGES:
        for precision in algebra.PRECISIONS:
            for mode in ("train", "eval"):
                for shape in ("7x33->65", "257x1000->999"):
                    for seed in range(2):
                        r = check.run_grad_case(problem, stage, mode, precision, shape, seed, "cuda", ["rand", "randn"][seed])
                        n += 1
                        if not r["passed"]:
                            bad.append((problem, stage, mode, precision, shape, seed, r["worst_ratio"], r["grad_errs"]))
os.environ[engine.ENV_VAR] = "mma"
for problem in ("84", "33"):
    for precision in ("tf32", "3xtf32"):
        r = check.run_grad_case(problem, "fused", "train", precision, "257x1000->999", 0, "cuda")
        n += 1
        if not r["passed"]:
            bad.append(("mma", problem, precision, r["worst_ratio"], r["grad_errs"]))
del os.environ[engine.ENV_VAR]
print(f"smoke: {n} gradient cases, {len(bad)} failed, {time.time()-t0:.0f} s", flush=True)
for b in bad[:20]:
    print("  FAIL", b)

# ---- determinism of the backward
ref = make_reference("84", 1000, 999, seed=0).cuda()
f = fusedlib.from_reference(ref, stage="fused", precision="tf32")
x = torch.rand(257, 1000, device="cuda", requires_grad=True)
dy = torch.randn(257, 999, device="cuda")
outs = []
for _ in range(3):
    f.zero_grad(); x.grad = None
    f(x).backward(dy)
    outs.append([x.grad.clone()] + [p.grad.clone() for p in f.parameters()])
print("backward reruns bit-identical:", all(torch.equal(a, b) for o in outs[1:] for a, b in zip(o, outs[0])))

# ---- train step timing
def timeit(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)

rows = []
for problem in ("84", "33", "39"):
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    dy = torch.randn(sh.batch, sh.out_features, device="cuda")
    def step(model):
        def run():
            for p in model.parameters():
                p.grad = None
            model(x).backward(dy)
        return run
    for precision in ("tf32", "fp32", "3xtf32"):
        impls = {}
        if precision != "3xtf32":
            impls["eager"] = copy.deepcopy(ref)
            if problem != "39":
                impls["compile"] = torch.compile(copy.deepcopy(ref))
        for stage in ("fused", "naive"):
            impls[stage] = fusedlib.from_reference(copy.deepcopy(ref), stage=stage, precision=precision)
        for name, model in impls.items():
            with engine.cublas_precision(precision if name in ("eager", "compile") else "fp32"):
                torch.cuda.reset_peak_memory_stats(); torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                fwd = timeit(lambda: model(x), 10) if name != "compile" else float("nan")
                ms = timeit(step(model))
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            rows.append((problem, precision, name, fwd, ms, peak))
            print(f"{problem:3s} {precision:6s} {name:8s} fwd {fwd:7.3f}  step {ms:7.3f} ms  peak +{peak:7.0f} MiB", flush=True)
        del impls
        torch.cuda.empty_cache()
# backward pieces at 84 tf32 (profiler)
sh = PRESETS["84"]
ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
f = fusedlib.from_reference(ref, stage="fused", precision="tf32")
x = torch.rand(sh.batch, sh.in_features, device="cuda")
dy = torch.randn(sh.batch, sh.out_features, device="cuda")
for _ in range(3):
    f(x).backward(dy)
torch.cuda.synchronize()
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        f(x).backward(dy)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
print("\nproblem precision impl fwd_ms step_ms peak_MiB")
for r in rows:
    print(*r)
