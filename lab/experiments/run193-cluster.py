"""run193: the persistent wgmma GEMM on clusters of two CTAs, W's tiles multicast (results/h200/NOTES.md,
"Where the 16-bit GEMM's gap to cuBLAS is").

The hypothesis there: at bf16's rate the L2→SM traffic of W's tiles (every W tile once a row tile)
sets the GEMM's pace at 84's shape, and cuBLAS's kernel (nvjet ..._1x2_..., 1 × 2 clusters) is
faster by multicasting each W tile into two CTAs. gemm_wgmma.cuh now runs its persistent kernel
(tf32, bf16, fp16) that way where the row tiles pair up (wg_cluster), and $FUSEDLIB_WGMMA_CLUSTER=0
(read at each call) forces one CTA a unit as before. This measures, at 84's KernelBench shape
(1024 × 8192 → 8192) in bf16, fp16 and tf32 (fp32 module at precision tf32), stages sums and fused,
train and eval: the module forward's GEMM kernel (wgmma_gemm_kernel), device µs a call from
torch.profiler (fusedlib.lab.profiling.profile_kernels: 20 calls after an L2 flush each), with
the cluster off and on, and cuBLAS's F.linear in the same dtype (tf32: TF32 allowed) in the same
run. Each setting runs from the same module state: Y and the running buffers of the first forward
must be the same bits both ways (the same tiles, products and order), and Y within the usual
error of the float64 model (tf32: check.BUDGET; 16-bit: twice eager PyTorch's error in the dtype,
the dtype's unit roundoff the floor, as tests/test_mixed_precision.py). The kernel's template
arguments are printed too (the last, true: the cluster instantiation ran). Prints a table; writes
$OUT/run193.log. Needs sm_90a (H100/H200); a few minutes with the build of the two stages.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))
N, K, M = 1024, 8192, 8192
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
UNIT = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11}
CALLS = 20


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double()
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-300)).item()


def gemm_us(kernels) -> tuple[float, str]:
    """The GEMM's device µs a call and its template arguments (from the demangled name)."""
    rows = [(name, us) for name, _, us in kernels if "wgmma_gemm_kernel" in name]
    name = rows[0][0] if rows else "?"
    args = name[name.find("<") + 1:name.find(">(")] if "<" in name else name
    return sum(us for _, us in rows), args


def main() -> int:
    import fusedlib
    from fusedlib.build import load_stage
    from fusedlib.check import BUDGET
    from fusedlib.lab.profiling import profile_kernels
    from fusedlib.reference import make_reference

    for stage in ("sums", "fused"):
        load_stage(stage)
    torch.manual_seed(0)
    ref = make_reference("84", K, M, seed=0).cuda()
    with torch.no_grad():  # running buffers away from their initial values
        ref(torch.rand(256, K, device="cuda"))
    x32 = torch.randn(N, K, device="cuda")
    lines = ["dtype stage mode  | GEMM us cluster off | on     | cuBLAS us | same bits | rel err off, on (bound) | kernel args off / on"]
    for dname, dtype in DTYPES.items():
        x = x32.to(dtype)
        w, b = ref.gemm.weight.detach().to(dtype), ref.gemm.bias.detach().to(dtype)
        torch.backends.cuda.matmul.allow_tf32 = dtype == torch.float32
        cublas = sum(us for _, _, us in profile_kernels(lambda v: F.linear(v, w, b), x, calls=CALLS))
        torch.backends.cuda.matmul.allow_tf32 = False
        for stage in ("sums", "fused"):
            for mode in ("train", "eval"):
                training = mode == "train"
                with torch.no_grad():
                    y64 = copy.deepcopy(ref).double().train(training)(x32.double())
                    if dtype == torch.float32:
                        bound = BUDGET["tf32"]
                    else:  # twice eager PyTorch's error in the dtype
                        eager = copy.deepcopy(ref).to(dtype).train(training)(x)
                        bound = max(2 * rel_err(eager, y64), UNIT[dtype])
                runs = {}
                for flag in ("0", "1"):
                    os.environ["FUSEDLIB_WGMMA_CLUSTER"] = flag
                    module = fusedlib.from_reference(copy.deepcopy(ref), stage=stage, precision="tf32")
                    module = module.to(dtype).cuda().train(training)
                    with torch.no_grad():
                        y = module(x)
                        outs = [y.clone(), module.bn.running_mean.clone(), module.bn.running_var.clone()]
                        us, args = gemm_us(profile_kernels(module, x, calls=CALLS))
                    runs[flag] = (outs, us, args, rel_err(y, y64))
                os.environ.pop("FUSEDLIB_WGMMA_CLUSTER", None)
                same = all(torch.equal(a, c) for a, c in zip(runs["0"][0], runs["1"][0]))
                ok = same and runs["0"][3] <= bound and runs["1"][3] <= bound
                lines.append(f"{dname:5s} {stage:5s} {mode:5s} | {runs['0'][1]:19.1f} | {runs['1'][1]:6.1f} | "
                             f"{cublas:9.1f} | {'yes' if same else 'NO':9s} | {runs['0'][3]:.2e}, {runs['1'][3]:.2e} "
                             f"({bound:.1e}){'' if ok else ' FAIL'} | {runs['0'][2]} / {runs['1'][2]}")
                print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    (OUT / "run193.log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
