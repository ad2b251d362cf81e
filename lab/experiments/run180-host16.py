"""run180: where the bf16 fused forward's time beyond its two kernels goes (issue 36 item 5).

The bench's protocol (L2 flush, CUDA events, interleaved rounds; fusedlib.lab.timing) on the
fused stage in bf16, train mode, no grad, at 84's and 33's KernelBench shapes and at 128x1024->512:
  module     the module's forward as it is (six vector casts before the GEMM, Y cast after)
  cat        the vectors cast in one cat + one cast, the first failing eager attempt skipped
  f32vec     the vectors already float32 (a bound: what the casts cost), Y cast after
  kernels    the vectors already float32, Y left float32 (the stage's kernels alone)
  eager      the reference model in bf16;  gemm_only  F.linear in bf16
Prints a table (ms, host µs); writes $OUT/run180-host16.csv.
"""
import copy, csv, os, sys
import torch
import torch.nn.functional as F
from fusedlib import cuda
from fusedlib.lab.timing import time_round_robin
from fusedlib.reference import make_reference
from fusedlib.modules import from_reference

torch.manual_seed(0)
rows = []
for problem, (n, k, m) in [("84", (1024, 8192, 8192)), ("33", (1024, 8192, 8192)), ("84", (128, 1024, 512)),
                           ("33", (128, 1024, 512))]:
    ref = make_reference(problem, k, m, seed=0).cuda()
    mod = from_reference(ref, stage="fused", precision="tf32").to(torch.bfloat16).cuda().train()
    eager = copy.deepcopy(ref).to(torch.bfloat16).train()
    x = torch.randn(n, k, device="cuda").bfloat16()
    t = mod._tensors()
    bn = mod._modules["bn"]
    sizes = [v.numel() for v in t[1:7]]
    out_dtype = torch.promote_types(x.dtype, t[2].dtype)
    pre = tuple(v.float() for v in t[1:7])

    def cat(x):
        flat = torch.cat(t[1:7]).float()
        f = flat.split(sizes)
        y = cuda.eager_forward(mod, x, (t[0], *f, t[7]), bn.eps, bn.momentum)
        torch._foreach_copy_([t[5], t[6]], [f[4], f[5]])
        return y.to(out_dtype)

    def f32vec(x):
        return cuda.eager_forward(mod, x, (t[0], *pre, t[7]), bn.eps, bn.momentum).to(out_dtype)

    def kernels(x):
        return cuda.eager_forward(mod, x, (t[0], *pre, t[7]), bn.eps, bn.momentum)

    w, b = ref.gemm.weight.bfloat16(), ref.gemm.bias.bfloat16()
    fns = {"module": (mod, None), "cat": (cat, None), "f32vec": (f32vec, None), "kernels": (kernels, None),
           "eager": (eager, None), "gemm_only": (lambda x: F.linear(x, w, b), None)}
    with torch.no_grad():
        y0 = mod(x).float(); y1 = cat(x).float()
        print(problem, n, k, m, "cat vs module max |diff|", (y0 - y1).abs().max().item(), flush=True)
        res = time_round_robin(fns, x, warmup=10, iters=200, rounds=5)
    for impl, (med, lo, hi, host) in res.items():
        rows.append(dict(problem=problem, shape=f"{n}x{k}->{m}", impl=impl, median_ms=round(med, 4),
                         min_ms=round(lo, 4), host_us=round(host, 1)))
out = os.environ.get("OUT", ".")
with open(f"{out}/run180-host16.csv", "w", newline="") as f:
    wr = csv.DictWriter(f, fieldnames=list(rows[0])); wr.writeheader(); wr.writerows(rows)
print(f"{'problem':8}{'shape':20}{'impl':12}{'median ms':>10}{'min ms':>10}{'host µs':>10}")
for r in rows:
    print(f"{r['problem']:8}{r['shape']:20}{r['impl']:12}{r['median_ms']:>10}{r['min_ms']:>10}{r['host_us']:>10}")
