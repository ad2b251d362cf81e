"""run180: where a bf16 train step's time goes (issue 36, item 5's train step), kernel by kernel.

84 and 33 at their KernelBench shape, the fused stage in bf16 (module.to(torch.bfloat16)) against
eager PyTorch in bf16, a train step as `python -m fusedlib train-step` runs it (forward with
grad, backward of a fixed dY, no optimizer): torch.profiler's device time per step for each
kernel (fusedlib.lab.profiling.profile_kernels' method: the L2 flush before each step), and the
host time of one step. Prints the tables; writes $OUT/run180-step16.csv.
"""
import copy, csv, os, time
import torch
from torch.profiler import ProfilerActivity, profile
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference
from fusedlib.lab.profiling import kernel_base

rows = []
for problem in ("84", "33"):
    ref = make_reference(problem, 8192, 8192, seed=0).cuda()
    x = torch.randn(1024, 8192, device="cuda").bfloat16()
    dy = torch.randn(1024, 8192, device="cuda").bfloat16()
    flush = torch.empty(64 << 20, device="cuda")
    for impl in ("fused", "eager"):
        model = (from_reference(ref, stage="fused", precision="tf32") if impl == "fused" else copy.deepcopy(ref))
        model = model.to(torch.bfloat16).train()

        def step():
            xi = x.clone().requires_grad_(True)
            model(xi).backward(dy)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        host = []
        for _ in range(10):
            flush.zero_(); torch.cuda.synchronize()
            t = time.perf_counter(); step(); host.append(time.perf_counter() - t); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                flush.zero_()
                step()
            torch.cuda.synchronize()
        for evt in prof.key_averages():
            us = getattr(evt, "device_time_total", getattr(evt, "cuda_time_total", 0)) / 5
            if us <= 0:
                continue
            rows.append(dict(problem=problem, impl=impl, kernel=kernel_base(evt.key)[:60], calls=round(evt.count / 5),
                             us_per_step=round(us, 1), host_us_per_step=round(1e6 * sorted(host)[5], 1)))
out = os.environ.get("OUT", ".")
with open(f"{out}/run180-step16.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
for problem in ("84", "33"):
    for impl in ("fused", "eager"):
        sel = [r for r in rows if r["problem"] == problem and r["impl"] == impl and r["us_per_step"] > 0.5]
        sel.sort(key=lambda r: -r["us_per_step"])
        print(f"== {problem} {impl}: kernels {sum(r['us_per_step'] for r in sel):.0f} µs a step "
              f"(the 64 MiB flush included), host {sel[0]['host_us_per_step']:.0f} µs a step")
        for r in sel[:16]:
            print(f"   {r['us_per_step']:8.1f} µs  x{r['calls']:<3} {r['kernel']}")
