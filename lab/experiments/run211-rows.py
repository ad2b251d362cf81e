"""run211 (prepared; one H100 or H200; issue 36): the fused stage's row pass of 84 (V = a∘Z′ + c, then
the softmax; online_softmax_rows_regs_kernel: one block of 256 threads a row, the row in registers)
takes 19.8 µs in bf16 and 22.5 in float32 at 1024 × 8192 (profile.csv): 48 and 64 MB, 2.4 and 2.9 TB/s
against a copy bandwidth of 4.1. With 1024 rows and 8 blocks an SM every block is resident at once,
so all of them load, then all reduce, then all store: the reads and the writes of the pass do not
overlap. This experiment builds, from a copy of the kernels (fusedlib.build.copy_kernels; the
package's untouched), a pipelined variant: $FUSEDLIB_ROWS_GRID blocks, each looping over rows
blockIdx.x, + grid, …, issuing the next row's loads before this row's reduction and stores (two
register sets; with $FUSEDLIB_ROWS_HOIST=1 also a and c in registers, read once). A row's
arithmetic is the package's, in the same order: the output must be the same bits (checked). Times
the row kernel (torch.profiler, 10 calls after an L2 flush each) in the fused train forward of 84
at its KernelBench shape, bf16 and tf32, for the package's kernel and the variant at several grids.
Writes $OUT/run211-rows.csv; prints a table. About 3 minutes with the build."""
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

from ab import eager_call, forward_keeping_buffers  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run211-rows")

KERNEL = """
// run211 draft: the register rows pipelined. Blocks loop over rows blockIdx.x, + gridDim.x, …; the
// next row's VEC 16-byte loads are issued before this row's reduction and stores; HOIST: a and c read
// once into registers. A row's arithmetic is online_softmax_rows_regs_kernel's, in its order.
template <int VEC, int OUT, bool HOIST>
__global__ void __launch_bounds__(kRegRowThreads) online_softmax_rows_pipelined_kernel(
    const float* z, const float* __restrict__ coef, float* y, int n, int m, long long* step) {
  __shared__ float red_m[2][kRegRowThreads / 32], red_l[2][kRegRowThreads / 32];
  count_train_step(step);
  const int q4 = m / 4;
  const float4 *a4 = reinterpret_cast<const float4*>(coef), *c4 = reinterpret_cast<const float4*>(coef + m);
  float4 v[VEC], nx[VEC], ah[HOIST ? VEC : 1], ch[HOIST ? VEC : 1];
  if (HOIST && coef) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q < q4) ah[i] = a4[q], ch[i] = c4[q];
    }
  }
  int row = blockIdx.x;
  if (row < n) {
    const float4* zr = reinterpret_cast<const float4*>(z + (size_t)row * m);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      v[i] = q < q4 ? zr[q] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  }
  for (int it = 0; row < n; row += gridDim.x, ++it) {
    const int next = row + gridDim.x;
    if (next < n) {
      const float4* zr = reinterpret_cast<const float4*>(z + (size_t)next * m);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const int q = threadIdx.x + i * kRegRowThreads;
        nx[i] = q < q4 ? zr[q] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
    }
    float mx = -INFINITY, l = 0.f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q >= q4) continue;
      if (coef) {
        const float4 a = HOIST ? ah[i] : a4[q], c = HOIST ? ch[i] : c4[q];
        v[i] = make_float4(a.x * v[i].x + c.x, a.y * v[i].y + c.y, a.z * v[i].z + c.z, a.w * v[i].w + c.w);
      }
      softmax_merge(mx, l, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)), 0.f);
      l += expf(v[i].x - mx) + expf(v[i].y - mx) + expf(v[i].z - mx) + expf(v[i].w - mx);
    }
    block_softmax_merge(mx, l, red_m[it & 1], red_l[it & 1]);  // (alternate words: no wait for the slowest reader)
    const float inv = 1.f / l;
    const size_t y4 = (size_t)row * (m / 4);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q < q4)
        store4<OUT>(y, y4 + q,
                    make_float4(expf(v[i].x - mx) * inv, expf(v[i].y - mx) * inv, expf(v[i].z - mx) * inv,
                                expf(v[i].w - mx) * inv));
      v[i] = nx[i];
    }
  }
}

inline int rows_grid() {  // $FUSEDLIB_ROWS_GRID: 0 (unset) runs the package's kernel
  const char* g = std::getenv("FUSEDLIB_ROWS_GRID");
  return g ? std::atoi(g) : 0;
}
inline bool rows_hoist() {
  const char* h = std::getenv("FUSEDLIB_ROWS_HOIST");
  return h && h[0] == '1';
}

// Register rows where they fit (and Z', Y, a, c are 16-byte aligned), else launch_rows."""

LAUNCH_OLD = """    kernel<<<n, kRegRowThreads, 0, st>>>(z, coef, y, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;"""
LAUNCH_NEW = """    if (const int grid = rows_grid(); grid > 0) {  // run211's pipelined variant
      const auto piped = [&](auto kern) { kern<<<std::min(grid, n), kRegRowThreads, 0, st>>>(z, coef, y, n, m, step); };
      const bool hoist = rows_hoist();
      if (vec == 1) hoist ? piped(online_softmax_rows_pipelined_kernel<1, OUT, true>) : piped(online_softmax_rows_pipelined_kernel<1, OUT, false>);
      else if (vec == 2) hoist ? piped(online_softmax_rows_pipelined_kernel<2, OUT, true>) : piped(online_softmax_rows_pipelined_kernel<2, OUT, false>);
      else if (vec <= 4) hoist ? piped(online_softmax_rows_pipelined_kernel<4, OUT, true>) : piped(online_softmax_rows_pipelined_kernel<4, OUT, false>);
      else hoist ? piped(online_softmax_rows_pipelined_kernel<8, OUT, true>) : piped(online_softmax_rows_pipelined_kernel<8, OUT, false>);
      FL_CHECK_LAUNCH();
      return nullptr;
    }
    kernel<<<n, kRegRowThreads, 0, st>>>(z, coef, y, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;"""


def rows_kernels(dest: Path) -> Path:
    """A copy of the kernels with the pipelined row kernel, chosen by $FUSEDLIB_ROWS_GRID."""
    copy_kernels(dest)
    path = dest / "passes.cuh"
    src = path.read_text()
    anchor = "// Register rows where they fit (and Z', Y, a, c are 16-byte aligned), else launch_rows."
    for old, new in ((anchor, KERNEL), (LAUNCH_OLD, LAUNCH_NEW)):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    path.write_text(src)
    return dest


def variants(sms: int) -> list[tuple[str, str | None, str]]:
    """(label, $FUSEDLIB_ROWS_GRID, $FUSEDLIB_ROWS_HOIST): the package's kernel, then the pipelined one
    at 1 and 2 blocks an SM (87 registers at VEC 8: 2 fit), and hoisted at 1 (156 registers)."""
    return [("package", None, "0"), ("pipelined, 1 a SM", str(sms), "0"), ("pipelined, 2 a SM", str(2 * sms), "0"),
            ("pipelined, a and c hoisted, 1 a SM", str(sms), "1")]


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ext = load_stage("fused", 0, COPY)
    ref = make_reference("84", 8192, 8192, seed=0)
    x32 = torch.rand(1024, 8192, device="cuda")
    rows = []
    for precision, dtype in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
        mod = from_reference(ref, stage="fused", precision="tf32").cuda().train()
        if dtype != torch.float32:
            mod = mod.to(dtype)
        x = x32.to(dtype)
        call = eager_call(ext, mod, "tf32")
        want = None
        for label, grid, hoist in variants(sms):
            os.environ.pop("FUSEDLIB_ROWS_GRID", None)
            if grid:
                os.environ["FUSEDLIB_ROWS_GRID"], os.environ["FUSEDLIB_ROWS_HOIST"] = grid, hoist
            with torch.no_grad():
                y = forward_keeping_buffers(call, x, mod.bn)[0]
                want = y if want is None else want
                same = torch.equal(y, want)
                ker = profile_kernels(call, x, calls=10)
            us = sum(r[2] for r in ker if "softmax_rows" in r[0])
            rows.append(dict(precision=precision, variant=label, us=us, bit_identical=same, sms=sms))
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run211-rows.csv", index=False)
    print(df.pivot_table(index="variant", columns="precision", values="us").round(1).to_string())


if __name__ == "__main__":
    if sys.argv[1:] == ["copy"]:
        rows_kernels(COPY)
    else:
        rows_kernels(COPY)
        main()
