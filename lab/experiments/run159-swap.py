"""run159 (one H100, prepared): what the operand swap for the 3xTF32 forward at 84/33 would save,
measured with the engine as it is (results/h100/NOTES.md, "What the 3xTF32 forward at 84/33
still needs"), before any epilogue is rewritten for it.

The swap computes Zᵀ = W Xᵀ: W becomes the operand the consumers split in registers and X the
one whose TF32 parts a pass makes once a call. The engine already runs exactly that mainloop
for a GEMM with many row tiles: out (n × m) = A Bᵀ with A split in registers and B's parts from
a pass (gemm_wgmma.cuh wg_w_pass). So the GEMM of a module with in_features K, out_features
1024 on a batch of 8192 rows (A = the 8192 × 8192 "input", B = the 1024 × 8192 "weight") is the
swapped GEMM of 84's 1024 × 8192 → 8192 in cost: the same FLOPs, the same operand bytes, B's
pass over 1024 × 8192 floats. Not quite: its 1024 columns are 5⅓ tiles of 192 (the engine's
3xTF32 width there), so it computes 12.5 % more than a swapped kernel with tiles that divide
1024 would; a saving it shows is therefore a lower bound. Its device time against the GEMM of 84's orientation (W split in
shared memory) is what the swap saves in the mainloop; the epilogue of the swapped form (column
statistics as row reductions, Z stored through shared memory) is not measured here.

Stage naive in eval mode (the GEMM with its bias epilogue, no shift; its other kernels are
left out), 3xTF32 and TF32, per-kernel device time from torch.profiler (fusedlib.lab.profiling),
each way of W's split forced in turn ($FUSEDLIB_WGMMA_WSPLIT); eager fp32's 84 train forward
in the same process, for the 0.42 target. Prints a table; writes $OUT/run159-swap.log.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))


def _gemm_us(n: int, k: int, m: int, precision: str, wsplit: str) -> tuple[float, float]:
    """(the wgmma GEMM kernel's µs, W's parts pass's µs) of one naive eval forward."""
    import fusedlib
    from fusedlib.lab.profiling import profile_kernels
    from fusedlib.reference import make_reference
    os.environ["FUSEDLIB_WGMMA_WSPLIT"] = wsplit
    module = fusedlib.from_reference(make_reference("33", k, m, seed=0), stage="naive",
                                     precision=precision).cuda().eval()
    x = torch.randn(n, k, device="cuda")
    with torch.no_grad():
        kernels = profile_kernels(module, x, calls=10)
    gemm = sum(us for name, _, us in kernels if "wgmma_gemm_kernel" in name)
    parts = sum(us for name, _, us in kernels if "w_parts_kernel" in name)
    return gemm, parts


def main() -> int:
    from fusedlib.lab.timing import time_cuda
    from fusedlib.reference import make_reference
    lines = ["orientation (n x k -> m) precision W split | GEMM us | parts pass us | total us"]
    for label, (n, k, m) in (("84 as is", (1024, 8192, 8192)), ("swapped", (8192, 8192, 1024))):
        for precision in ("tf32", "3xtf32"):
            for wsplit in (("smem", "pass") if precision == "3xtf32" else ("smem",)):
                gemm, parts = _gemm_us(n, k, m, precision, wsplit)
                lines.append(f"{label:9s} {n}x{k}->{m} {precision:6s} {wsplit:4s} | {gemm:8.1f} | {parts:8.1f} | "
                             f"{gemm + parts:8.1f}")
    os.environ.pop("FUSEDLIB_WGMMA_WSPLIT", None)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = make_reference("84", 8192, 8192, seed=0).cuda().train()
    x = torch.randn(1024, 8192, device="cuda")
    with torch.no_grad():
        eager_ms = time_cuda(ref, x)[0]
    lines.append(f"eager fp32 84 train forward: {eager_ms:.3f} ms (median)")
    text = "\n".join(lines)
    print(text)
    (OUT / "run159-swap.log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
