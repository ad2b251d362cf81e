"""run211 (prepared, on branch ztma's kernels; one H100 or H200; issue 36): the fused stage's row pass of
84 (V = a∘Z′ + c, then the softmax; online_softmax_rows_regs_kernel: one block of 256 threads a row,
the row in registers) took 19.8 µs in bf16 at 1024 × 8192 (run212's profile.csv). With Z′ in bf16 (branch
ztma) the pass moves 16 MB of Z′ and 16 MB of Y through DRAM, about 7 µs at the H200's 4.8 TB/s, but
every row also reads a and c (64 KB, float32) from L2: 64 MB of L2 reads for 32 MB of DRAM traffic.
And with 1024 rows and 8 blocks an SM every block is resident at once, so all of them load, then all
reduce, then all store: the reads and the writes do not overlap. This experiment builds, from a copy
of the kernels (fusedlib.build.copy_kernels; the package's untouched), a pipelined variant:
$FUSEDLIB_ROWS_GRID blocks, each looping over rows blockIdx.x, + grid, …, issuing the next row's loads
before this row's reduction and stores; $FUSEDLIB_ROWS_COEF says where a thread's a and c come from:
0 from L2 every row (as the package), 1 read once into registers (VEC 8: 64 more registers),
2 read once into shared memory (each thread its own columns' words; 2·M·4 bytes a block). A row's
arithmetic is the package's, in the same order: the output must be the same bits (checked). Times the
row kernel (torch.profiler, 10 calls after an L2 flush each) in the fused train forward of 84 at its
KernelBench shape, bf16 and tf32, for the package's kernel and the variants at 1 and 2 blocks an SM.
`python run211-rows.py copy` writes the copy (once: a rewrite makes ninja rebuild it); then the
script builds and times it. Writes $OUT/run211-rows.csv; prints a table. About 3 minutes with the build."""
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

from ab import apply_edits, eager_call, forward_keeping_buffers  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run211-rows")

KERNEL = """
// run211 draft: the register rows pipelined. Blocks loop over rows blockIdx.x, + gridDim.x, …; the
// next row's VEC loads of Z' are issued before this row's reduction and stores. COEF: a and c from
// L2 every row (0), read once into registers (1) or into shared memory (2: thread t's own columns,
// so no barrier). A row's arithmetic is online_softmax_rows_regs_kernel's, in its order.
template <int VEC, int OUT, int IN, int COEF>
__global__ void __launch_bounds__(kRegRowThreads) online_softmax_rows_pipelined_kernel(
    const float* z, const float* __restrict__ coef, float* y, int n, int m, long long* step) {
  __shared__ float red_m[2][kRegRowThreads / 32], red_l[2][kRegRowThreads / 32];
  extern __shared__ float4 coef_smem[];  // COEF 2: a then c, M / 4 groups each
  count_train_step(step);
  const int q4 = m / 4;
  const float4 *a4 = reinterpret_cast<const float4*>(coef), *c4 = reinterpret_cast<const float4*>(coef + m);
  float4 v[VEC], nx[VEC], ah[COEF == 1 ? VEC : 1], ch[COEF == 1 ? VEC : 1];
  if (COEF && coef) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q >= q4) continue;
      if (COEF == 1) ah[i] = a4[q], ch[i] = c4[q];
      else coef_smem[q] = a4[q], coef_smem[q4 + q] = c4[q];
    }
  }
  const auto load_row = [&](float4* dst, int r) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      dst[i] = q < q4 ? load4<IN>(z, (size_t)r * q4 + q) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  };
  int row = blockIdx.x;
  if (row < n) load_row(v, row);
  for (int it = 0; row < n; row += gridDim.x, ++it) {
    if (row + gridDim.x < n) load_row(nx, row + gridDim.x);
    float mx = -INFINITY, l = 0.f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q >= q4) continue;
      if (coef) {
        const float4 a = COEF == 1 ? ah[i] : COEF == 2 ? coef_smem[q] : a4[q];
        const float4 c = COEF == 1 ? ch[i] : COEF == 2 ? coef_smem[q4 + q] : c4[q];
        v[i] = make_float4(a.x * v[i].x + c.x, a.y * v[i].y + c.y, a.z * v[i].z + c.z, a.w * v[i].w + c.w);
      }
      softmax_merge(mx, l, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)), 0.f);
      l += expf(v[i].x - mx) + expf(v[i].y - mx) + expf(v[i].z - mx) + expf(v[i].w - mx);
    }
    block_softmax_merge(mx, l, red_m[it & 1], red_l[it & 1]);  // (alternate words: no wait for the slowest reader)
    const float inv = 1.f / l;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int q = threadIdx.x + i * kRegRowThreads;
      if (q < q4)
        store4<OUT>(y, (size_t)row * q4 + q,
                    make_float4(expf(v[i].x - mx) * inv, expf(v[i].y - mx) * inv, expf(v[i].z - mx) * inv,
                                expf(v[i].w - mx) * inv));
      v[i] = nx[i];
    }
  }
}

inline int rows_env(const char* name) {  // $FUSEDLIB_ROWS_GRID (0, unset: the package's kernel), _COEF
  const char* g = std::getenv(name);
  return g ? std::atoi(g) : 0;
}

template <int VEC, int OUT, int IN>
inline const char* launch_pipelined_rows(const float* z, const float* coef, float* y, int n, int m, long long* step,
                                         int grid, int where, cudaStream_t st) {
  const auto go = [&](auto kern, size_t smem) -> const char* {
    if (smem) FL_OPT_IN_SMEM(kern, smem);
    kern<<<std::min(grid, n), kRegRowThreads, smem, st>>>(z, coef, y, n, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;
  };
  if (where == 1) return go(online_softmax_rows_pipelined_kernel<VEC, OUT, IN, 1>, 0);
  if (where == 2) return go(online_softmax_rows_pipelined_kernel<VEC, OUT, IN, 2>, 2 * (size_t)m * sizeof(float));
  return go(online_softmax_rows_pipelined_kernel<VEC, OUT, IN, 0>, 0);
}

// Register rows where they fit (and Z', Y, a, c are 16-byte aligned), else launch_rows."""

LAUNCH_OLD = """    kernel<<<n, kRegRowThreads, 0, st>>>(z, coef, y, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;"""
LAUNCH_NEW = """    if (const int grid = rows_env("FUSEDLIB_ROWS_GRID"); grid > 0) {  // run211's pipelined variant
      const int where = rows_env("FUSEDLIB_ROWS_COEF");
      return vec == 1   ? launch_pipelined_rows<1, OUT, IN>(z, coef, y, n, m, step, grid, where, st)
             : vec == 2 ? launch_pipelined_rows<2, OUT, IN>(z, coef, y, n, m, step, grid, where, st)
             : vec <= 4 ? launch_pipelined_rows<4, OUT, IN>(z, coef, y, n, m, step, grid, where, st)
                        : launch_pipelined_rows<8, OUT, IN>(z, coef, y, n, m, step, grid, where, st);
    }
    kernel<<<n, kRegRowThreads, 0, st>>>(z, coef, y, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;"""


def rows_kernels(dest: Path) -> Path:
    """A copy of the kernels with the pipelined row kernel, chosen by $FUSEDLIB_ROWS_GRID."""
    copy_kernels(dest)
    apply_edits(dest, {"passes.cuh": [("// Register rows where they fit (and Z', Y, a, c are 16-byte aligned), else launch_rows.",
                                       KERNEL), (LAUNCH_OLD, LAUNCH_NEW)]})
    return dest


def variants(sms: int) -> list[tuple[str, str | None, str]]:
    """(label, $FUSEDLIB_ROWS_GRID, $FUSEDLIB_ROWS_COEF): the package's kernel, then the pipelined one
    at 1 and 2 blocks an SM with a and c from L2, from registers (1 a SM: VEC 8 holds 64 more) and from
    shared memory."""
    return [("package", None, "0"), ("pipelined, 1 a SM", str(sms), "0"), ("pipelined, 2 a SM", str(2 * sms), "0"),
            ("pipelined, a and c in registers, 1 a SM", str(sms), "1"),
            ("pipelined, a and c in shared memory, 1 a SM", str(sms), "2"),
            ("pipelined, a and c in shared memory, 2 a SM", str(2 * sms), "2")]


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
        for label, grid, where in variants(sms):
            os.environ.pop("FUSEDLIB_ROWS_GRID", None)
            if grid:
                os.environ["FUSEDLIB_ROWS_GRID"], os.environ["FUSEDLIB_ROWS_COEF"] = grid, where
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
        main()
