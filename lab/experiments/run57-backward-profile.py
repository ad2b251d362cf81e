"""run57: per-kernel device time of one train step (forward + backward, x without gradient)
of the fused stage, torch.profiler, at 84 (tf32, 3xtf32) and 39 (tf32, 3xtf32): the backward's
kernels (row_dot, partials, dz, the TF32 splits, cuBLAS GEMMs) beside the forward's."""
import collections
import torch
from torch.profiler import ProfilerActivity, profile
import fusedlib
from fusedlib.reference import PRESETS, make_reference
from fusedlib.lab.trainstep import train_step

for problem, precision in [("84", "tf32"), ("84", "3xtf32"), ("39", "tf32"), ("39", "3xtf32")]:
    torch.manual_seed(0)
    shape = PRESETS[problem]
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda().train()
    m = fusedlib.from_reference(ref, stage="fused", precision=precision)
    x = torch.randn(shape.batch, shape.in_features, device="cuda")
    dy = torch.randn(shape.batch, shape.out_features, device="cuda")
    step = train_step(m, dy)
    for _ in range(5):
        step(x)
    torch.cuda.synchronize()
    reps = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step(x)
        torch.cuda.synchronize()
    tot = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name[:100]] += e.device_time / reps
    print(f"== {problem} {precision} fused train step: {sum(tot.values()):.1f} us of kernels per step")
    for name, us in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f"  {us:9.1f} us  {name}")
