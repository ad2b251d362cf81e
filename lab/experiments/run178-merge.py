"""run178 PART=c (one H100): the backward's last-tile merge with its loads 4 ahead (common.cuh
merge_blocked) against the merge before it, each from its own source tree (argv[1]: a label).
Prints, for the fused stage's train step at 84's and 33's shape (1024 × 8192 → 8192) at fp32 and
3xtf32: the column pass (backward_partials_kernel) in µs from torch.profiler (mean of 20 steps),
and the step's median ms (time_cuda, forward + backward)."""
from __future__ import annotations

import sys

import torch

import fusedlib
from fusedlib.lab.timing import time_cuda
from fusedlib.reference import make_reference


def main(label: str) -> None:
    for kind in ("84", "33"):
        ref = make_reference(kind, 8192, 8192, seed=0).cuda()
        x = torch.randn(1024, 8192, device="cuda")
        for precision in ("fp32", "3xtf32"):
            module = fusedlib.from_reference(ref, stage="fused", precision=precision).train()

            def step(v):
                module.zero_grad(set_to_none=True)
                module(v).square().mean().backward()
            ms = time_cuda(step, x, warmup=3, iters=20)[0]
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    step(x)
                torch.cuda.synchronize()
            us = [e.device_time for e in prof.events() if "backward_partials_kernel" in e.name]
            print(f"{label} {kind} {precision} | column pass {sum(us) / max(len(us), 1):.1f} us ({len(us)} calls) | "
                  f"step {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
