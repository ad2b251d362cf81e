"""run51: after dW = dZ'ᵀ(X − x̄) (centered_x) and the merge's loads ahead, before the full
re-run: (1) the backward's kernels per train step under torch.profiler (84 tf32, 33 tf32,
39 tf32 and 3xtf32, fused, x without grad), (2) the forward's kernels of sums and fused at
33 tf32 train (the merge's tail), (3) gradient cases on offset inputs (fp32, 3xtf32) on CUDA."""
import sys, time
import torch
import fusedlib
from fusedlib import check
from fusedlib.reference import PRESETS, make_reference


def kernels(fn, calls=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / calls / e.count * calls, e.count // calls)
            for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1] * r[2])


def show(title, rows):
    total = sum(us * n for _, us, n in rows)
    print(f"\n## {title}: {total:.1f} µs of kernels a call", flush=True)
    for name, us, n in rows:
        print(f"  {us:9.1f} µs x{n}  {name[:110]}")


t0 = time.time()
for problem, precision in (("84", "tf32"), ("33", "tf32"), ("39", "tf32"), ("39", "3xtf32")):
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    f = fusedlib.from_reference(ref, stage="fused", precision=precision)
    x = torch.rand(sh.batch, sh.in_features, device="cuda")
    dy = torch.randn(sh.batch, sh.out_features, device="cuda")
    show(f"{problem} {precision} fused train step (fwd+bwd)", kernels(lambda: f(x).backward(dy)))
    del f, ref, x, dy
    torch.cuda.empty_cache()
sh = PRESETS["33"]
ref = make_reference("33", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.rand(sh.batch, sh.in_features, device="cuda")
with torch.no_grad():
    for stage in ("sums", "fused"):
        m = fusedlib.from_reference(ref, stage=stage, precision="tf32")
        show(f"33 tf32 train forward, {stage}", kernels(lambda: m(x), 20))
print(f"\nprofiles done in {time.time() - t0:.0f} s", flush=True)
bad, n, worst = [], 0, {}
for problem in ("84", "33"):
    for stage in ("naive", "fused"):
        for precision in ("fp32", "3xtf32"):
            for shape in ("7x33->65", "257x1000->999", "v0"):
                for seed in (2, 5):
                    r = check.run_grad_case(problem, stage, "train", precision, shape, seed, "cuda", "offset")
                    n += 1
                    key = (problem, precision, shape)
                    worst[key] = max(worst.get(key, 0), r["worst_ratio"])
                    if not r["passed"]:
                        bad.append((problem, stage, precision, shape, seed, round(r["worst_ratio"], 2),
                                    {k: f"{v:.1e}/{r['ref_grad_errs'][k]:.1e}" for k, v in r["grad_errs"].items()}))
                    if shape == "257x1000->999" and seed == 2 and stage == "fused":
                        print(problem, precision, "dW err", f"{r['grad_errs']['gemm.weight']:.1e}",
                              "PyTorch fp32", f"{r['ref_grad_errs']['gemm.weight']:.1e}", flush=True)
print(f"\noffset gradient cases: {n - len(bad)}/{n} pass ({time.time() - t0:.0f} s)")
for k, v in worst.items():
    print("  worst error/budget", *k, f"{v:.2f}")
for b in bad:
    print("  FAIL", b)
