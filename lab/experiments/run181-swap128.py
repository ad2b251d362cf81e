"""run181 (prepared, not run): the operand swap's mainloop with a 3xTF32 tile width that divides 1024.

run180 (results/h200/NOTES.md, "Issue 32's operand swap measured") timed the swapped GEMM of
84/33 (Zᵀ = W Xᵀ: 8192 × 8192 → 1024, W split in registers, X's TF32 parts from one pass) with
the engine's 3xTF32 widths, 192 and 168: 1024 columns are 5⅓ tiles of 192, so it computed 12.5 %
more than needed and saved 8 µs of 1102 where the scaled estimate says up to 126. This experiment
builds, from a copy of the kernels (fusedlib.build.copy_kernels, load_stage(kernel_dir=...); the
package's kernels untouched), the same kernel with a third width, 128 (wgmma m64n128k8: 64
accumulators and 64 promoted a thread, four stages of 48 KB), forced by $FUSEDLIB_WGMMA_SPLITWIDTH
in the copy, and times the naive stage's eval GEMM at 8192 × 8192 → 1024 (the swapped 84) at
widths 192 and 128 with X's parts from the pass, and 84 as it is (1024 × 8192 → 8192, 168, W split
in shared memory), per kernel by torch.profiler (fusedlib.lab.profiling.profile_kernels: 10 calls
after an L2 flush each). Each output is checked against float64 first. Prints a table; writes
$OUT/run181-swap128.log. Needs sm_90a; about 2 minutes with the build.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))

WRAPPER_128 = '''__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {  // m64n128k8
  asm volatile(
      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %69, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{''' + ", ".join(f"%{i}" for i in range(64)) + '''}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\\n"
      "}\\n"
      : ''' + ", ".join(f'"+f"(d[{i}])' for i in range(64)) + '''
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
'''


def edited_kernels(dest: Path) -> Path:
    """A copy of the kernels with the 128-wide 3xTF32 tile and $FUSEDLIB_WGMMA_SPLITWIDTH."""
    from fusedlib.build import copy_kernels
    copy_kernels(dest)
    path = dest / "gemm_wgmma.cuh"
    src = path.read_text()
    edits = [
        ("constexpr int kSplitWide = 192, kSplitNarrow = 168;",
         "constexpr int kSplitWide = 192, kSplitNarrow = 168, kSplitSmall = 128;"),
        ("__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[84]",
         WRAPPER_128 + "__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[84]"),
        # (the split loop takes a tail: BN = 128's 16 KB are 10⅔ rounds of the 96 splitting threads)
        ('  static_assert(BYTES % (16 * kWgSplitThreads) == 0, "whole float4 rounds");\n', ""),
        ("inline int split_tile_width(int n, int m) {\n",
         "inline int split_tile_width(int n, int m) {\n"
         "  if (const char* w = std::getenv(\"FUSEDLIB_WGMMA_SPLITWIDTH\"); w && std::atoi(w) > 0) return std::atoi(w);\n"),
        ("  return bn == kSplitWide ? launch_wg<kSplitWide, true, Epi>(p, out, a, b0, row0, b1, st)\n"
         "                          : launch_wg<kSplitNarrow, true, Epi>(p, out, a, b0, row0, b1, st);",
         "  return bn == kSplitWide    ? launch_wg<kSplitWide, true, Epi>(p, out, a, b0, row0, b1, st)\n"
         "         : bn == kSplitSmall ? launch_wg<kSplitSmall, true, Epi>(p, out, a, b0, row0, b1, st)\n"
         "                             : launch_wg<kSplitNarrow, true, Epi>(p, out, a, b0, row0, b1, st);"),
    ]
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    path.write_text(src)
    return dest


def main() -> int:
    import fusedlib
    from fusedlib.build import load_stage
    from fusedlib.lab.profiling import profile_kernels
    from fusedlib.reference import make_reference
    ext = load_stage("naive", 0, edited_kernels(Path("build/run181-kernels")))
    lines = ["case (n x k -> m)                    width  W/X split | GEMM us | parts pass us | total us | rel err"]
    for label, (n, k, m), width, wsplit in (("84 as is", (1024, 8192, 8192), "168", "smem"),
                                            ("swapped 84", (8192, 8192, 1024), "192", "pass"),
                                            ("swapped 84", (8192, 8192, 1024), "128", "pass"),
                                            ("swapped 84", (8192, 8192, 1024), "128", "smem")):
        os.environ["FUSEDLIB_WGMMA_SPLITWIDTH"], os.environ["FUSEDLIB_WGMMA_WSPLIT"] = width, wsplit
        module = fusedlib.from_reference(make_reference("33", k, m, seed=0), stage="naive",
                                         precision="3xtf32").cuda().eval()
        t = module._tensors()
        bn = module.bn
        x = torch.randn(n, k, device="cuda")

        def call(x):
            return ext.eager_forward(x, *t, "33", "3xtf32", False, bn.eps, bn.momentum)
        ref64 = make_reference("33", k, m, seed=0).double().cuda().eval()  # the same parameters, in float64
        with torch.no_grad():
            y, want = call(x).double(), ref64(x.double())
            err = ((y - want).norm() / want.norm()).item()
            kernels = profile_kernels(call, x, calls=10)
        gemm = sum(us for name, _, us in kernels if "wgmma_gemm_kernel" in name)
        parts = sum(us for name, _, us in kernels if "w_parts_kernel" in name)
        lines.append(f"{label:11s} {n}x{k}->{m:<6d}      {width:>5s}  {wsplit:4s}      | {gemm:7.1f} | {parts:13.1f} | "
                     f"{gemm + parts:8.1f} | {err:.1e}")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    (OUT / "run181-swap128.log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
