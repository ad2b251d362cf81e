"""run178 (one H100): the 16-bit route's speed at the KernelBench shapes, train mode: the fused
module in bf16 on the 16-bit kernels against the same module on the float32 kernels (the route
before it: every tensor converted, the GEMM at TF32), eager bf16 and cuBLAS's bf16 GEMM alone
(F.linear with bias); forward, and forward + backward. Median ms of time_cuda (L2 flushed)."""
from __future__ import annotations

import copy
from unittest import mock

import torch
import torch.nn.functional as F

import fusedlib
from fusedlib import cuda
from fusedlib.lab.timing import time_cuda
from fusedlib.reference import make_reference

SHAPES = {"84": (1024, 8192, 8192), "33": (1024, 8192, 8192), "39": (16384, 4096, 4096)}


def main() -> None:
    print("problem dtype | fused 16-bit | fused float32 route | eager | cuBLAS GEMM | fused/eager | step fused | step eager")
    for problem, (n, k, m) in SHAPES.items():
        kind = "84" if problem == "84" else "33"
        ref = make_reference(kind, k, m, seed=0).cuda()
        for dtype in (torch.bfloat16, torch.float16):
            eager = copy.deepcopy(ref).to(dtype).train()
            fused = fusedlib.from_reference(ref, stage="fused", precision="tf32").to(dtype).train()
            x = torch.randn(n, k, device="cuda", dtype=dtype)
            w, b = eager.gemm.weight.detach(), eager.gemm.bias.detach()
            t = {}
            with torch.no_grad():
                t["fused"] = time_cuda(fused, x, warmup=5, iters=30)[0]
                with mock.patch.object(cuda, "sixteen_bit_kernels", lambda *_: False):
                    t["route32"] = time_cuda(fused, x, warmup=5, iters=30)[0]
                t["eager"] = time_cuda(eager, x, warmup=5, iters=30)[0]
                t["gemm"] = time_cuda(lambda v: F.linear(v, w, b), x, warmup=5, iters=30)[0]

            def step(model):
                def run(v):
                    model.zero_grad(set_to_none=True)
                    model(v).float().square().mean().backward()
                return run
            t["step_fused"] = time_cuda(step(fused), x, warmup=3, iters=20)[0]
            t["step_eager"] = time_cuda(step(eager), x, warmup=3, iters=20)[0]
            print(f"{problem} {str(dtype)[6:]} | {t['fused']:.3f} | {t['route32']:.3f} | {t['eager']:.3f} | "
                  f"{t['gemm']:.3f} | {t['fused'] / t['eager']:.3f} | {t['step_fused']:.3f} | {t['step_eager']:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
