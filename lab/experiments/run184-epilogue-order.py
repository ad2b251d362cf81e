"""run184 (prepared, not run): does the statistics epilogue's fence wait on the tile's Z stores?

profile.csv (run182, H200, train, KernelBench shapes) puts the fused stage's GEMM (ColumnStatsMerge)
above the sums stage's (ColumnStats) by 15 µs at 84 in bf16 (198.4 against 183.5) and 9 µs in
tf32 (353.1 against 343.7), more than sums' separate merge kernel takes (6 µs). The two epilogues
differ in count_and_merge (the persistent GEMM's deferred count; 3xTF32's kernel, one CTA a tile,
counts and lets the block's last tile merge): every one of the 256 consumer threads runs
__threadfence() before the tile is counted, after it stored its share of the tile's Z (128 KB at BN = 256), so each fence may
wait until those stores are visible device-wide, on every tile. (Moving the statistics before the
stores instead keeps the 128 accumulators live through them: ptxas spills in 7 wgmma kernels.)
This builds, from a copy of the kernels (fusedlib.build.copy_kernels, the package untouched), the
fused and sums stages with CUTLASS's barrier pattern instead (cutlass/barrier.h arrive_inc: the
CTA's barrier, then one thread's release fence and the count; PTX fences are cumulative over what
the barrier ordered before them), and times the GEMM kernel of each against the stock kernels
(fusedlib.lab.profiling: 10 calls after an L2 flush each) at 84's and 33's KernelBench shape in
train mode, bf16, tf32 and 3xtf32; Y and the running buffers of the edited kernels must equal the
stock kernels' bit for bit (the fence changes no value). Prints a table; writes
$OUT/run184-epilogue-order.log. Needs sm_90a; about 3 minutes with the two builds.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))

FENCE_ALL = """  __threadfence();  // this tile's partials visible device-wide before it is counted
  epilogue_sync<THREADS>();
  if (DEFER) {
    if (tid == 0) atomicAdd(p.counters + col_block, 1u);
    return;
  }
  if (tid == 0) {
    *flag"""
FENCE_ONE = """  epilogue_sync<THREADS>();  // every thread's partials written (cumulative: tid 0's fence covers them)
  if (DEFER) {
    if (tid == 0) __threadfence(), atomicAdd(p.counters + col_block, 1u);
    return;
  }
  if (tid == 0) {
    __threadfence();
    *flag"""


def edited_kernels(dest: Path) -> Path:
    """A copy of the kernels whose tile count (deferred, the persistent GEMM's; or with the last
    tile's merge, 3xTF32's one CTA a tile) fences in one thread after the CTA's barrier."""
    from fusedlib.build import copy_kernels
    copy_kernels(dest)
    path = dest / "epilogue.cuh"
    src = path.read_text()
    assert src.count(FENCE_ALL) == 1
    path.write_text(src.replace(FENCE_ALL, FENCE_ONE))
    return dest


def main() -> int:
    import fusedlib
    from fusedlib.build import load_stage
    from fusedlib.lab.profiling import profile_kernels
    from fusedlib.reference import make_reference
    edited = edited_kernels(Path("build/run184-kernels"))
    lines = ["problem precision stage | GEMM µs stock | GEMM µs one fence | Δ µs | kernels µs stock → edited | same bits"]
    for kind in ("84", "33"):
        ref = make_reference(kind, 8192, 8192, seed=0).cuda()
        for precision in ("bf16", "tf32", "3xtf32"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            x = torch.randn(1024, 8192, device="cuda").to(dtype)
            for stage in ("sums", "fused"):
                base = fusedlib.from_reference(ref, stage=stage, precision="tf32" if precision == "bf16" else precision)
                base = base.to(dtype).cuda().train()
                row, outs = [], []
                for kernel_dir in (None, edited):
                    ext = load_stage(stage, 0, kernel_dir)
                    module = copy.deepcopy(base)
                    t, bn = module._tensors(), module.bn

                    def call(x, ext=ext, t=t, bn=bn, module=module):
                        return ext.eager_forward(x, *t, kind, module.precision, True, bn.eps, bn.momentum)
                    with torch.no_grad():
                        outs.append((call(x), bn.running_mean.clone(), bn.running_var.clone()))
                        kernels = profile_kernels(call, x, calls=10)
                    row.append((sum(us for name, _, us in kernels if "gemm_kernel" in name),
                                sum(us for _, _, us in kernels)))
                same = all(torch.equal(a, b) for a, b in zip(*outs))
                (g0, k0), (g1, k1) = row
                lines.append(f"{kind:7s} {precision:9s} {stage:5s} | {g0:13.1f} | {g1:16.1f} | {g1 - g0:+5.1f} | "
                             f"{k0:7.1f} → {k1:7.1f}         | {same}")
                print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    (OUT / "run184-epilogue-order.log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
