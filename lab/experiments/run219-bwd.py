"""run219 (one H100 or H200; issue 36's autocast step at 33): the backward's column pass and dZ′ pass
under Nsight Compute. run215 put them at 34.8 µs (backward_partials_kernel, 67 MB read: 1.9 TB/s)
and 38.2 µs (backward_dz_kernel) of 33's autocast step, against a copy bandwidth of 4.1 TB/s. Two
float32 train steps of 33 and of 84 (fused stage, tf32, batch 1024, 8192 → 8192: the same
backward kernels as the autocast step's float32 dY), the second step's kernels profiled by
`ncu --clock-control none` (sections SpeedOfLight, MemoryWorkloadAnalysis, Occupancy,
WarpStateStats, LaunchStats)."""
import torch

from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

for problem in ("33", "84"):
    ref = make_reference(problem, 8192, 8192, seed=0)
    mod = from_reference(ref, stage="fused", precision="tf32").cuda().train()
    x = torch.rand(1024, 8192, device="cuda")
    dy = torch.randn(1024, 8192, device="cuda")
    for _ in range(2):
        mod(x).backward(dy)
    torch.cuda.synchronize()
