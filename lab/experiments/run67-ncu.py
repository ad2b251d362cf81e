"""run67: one GEMM for Nsight Compute at 84's KernelBench shape (1024x8192->8192), chosen by
argv[1]: simt (the naive stage's fp32 GEMM, the engine's SIMT mainloop), sgemm (cuBLAS fp32,
F.linear), wgmma (the fused stage's tf32 forward: GEMM with its statistics epilogue, row pass),
fused3x (the fused stage's 3xtf32 forward: X's split, GEMM, row pass), tf32 (cuBLAS TF32,
F.linear). Three calls; ncu profiles the third (--launch-skip 2 --launch-count 1 with a
kernel-name filter). Run from the repository root with PYTHONPATH=. and the build cache."""
import sys

import torch
import torch.nn.functional as F

import fusedlib
from fusedlib.reference import make_reference

which = sys.argv[1]
torch.backends.cuda.matmul.allow_tf32 = which == "tf32"
n, k, m = 1024, 8192, 8192
ref = make_reference("84", k, m, seed=0).cuda()
x = torch.rand(n, k, device="cuda")
if which in ("simt", "wgmma", "fused3x"):
    mod = fusedlib.from_reference(ref, stage="naive" if which == "simt" else "fused",
                                  precision={"simt": "fp32", "wgmma": "tf32", "fused3x": "3xtf32"}[which])
    fn = lambda: mod(x)
else:
    fn = lambda: F.linear(x, ref.gemm.weight, ref.gemm.bias)
with torch.no_grad():
    for _ in range(3):
        fn()
torch.cuda.synchronize()
print(which, "done")
