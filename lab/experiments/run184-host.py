"""run184: where the host time of a bf16 train step goes (issue 36, item 5's train step).

run180-step16 measured a bf16 train step at 84's KernelBench shape taking 1270 µs of host time
fused against 906 eager (the step host-bound: 964 µs of kernels). This names the parts: for the
fused module in bf16 (module.to(torch.bfloat16)) and eager PyTorch in bf16, a train step as
`python -m fusedlib train-step` runs it (forward with grad, backward of a fixed dY, no optimizer),
  1. cProfile over 100 steps, each followed by torch.cuda.synchronize (so that the launch queue
     never blocks the host inside a step): Python functions by own time and by cumulative time,
     per step, in µs;
  2. torch.profiler's CPU side over 20 steps: operators (aten, fusedlib and autograd's nodes) by
     self CPU time per step.
Run on the tree the step is to be measured on (the patches applied or not). Prints the tables;
writes $OUT/run184-host.log.
"""
import copy
import cProfile
import io
import os
import pstats

import torch
from torch.profiler import ProfilerActivity, profile

from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

STEPS, PROFILED = 100, 20
out = io.StringIO()
ref = make_reference("84", 8192, 8192, seed=0).cuda()
x = torch.randn(1024, 8192, device="cuda").bfloat16()
dy = torch.randn(1024, 8192, device="cuda").bfloat16()
for impl in ("fused", "eager"):
    model = from_reference(ref, stage="fused", precision="tf32") if impl == "fused" else copy.deepcopy(ref)
    model = model.to(torch.bfloat16).train()

    def step():
        xi = x.clone().requires_grad_(True)
        model(xi).backward(dy)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    for _ in range(STEPS):
        prof.enable()
        step()
        prof.disable()
        torch.cuda.synchronize()
    for order in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(order).print_stats(22)
        print(f"== {impl}: cProfile by {order}, {STEPS} steps (divide by {STEPS} for a step)\n{s.getvalue()}", file=out)
    with profile(activities=[ProfilerActivity.CPU]) as tp:
        for _ in range(PROFILED):
            step()
            torch.cuda.synchronize()
    table = tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(f"== {impl}: torch.profiler CPU, {PROFILED} steps (totals; divide by {PROFILED})\n{table}", file=out)
text = out.getvalue()
print(text)
with open(os.path.join(os.environ.get("OUT", "."), "run184-host.log"), "w") as f:
    f.write(text)
