"""run239 (prepared; one H100 or H200; issue 36's ≤ 1.10 × cuBLAS): the affine row pass of 33/39
(Y = a∘Z′ + c) at the copy bandwidth. The package's affine_kernel (passes.cuh) takes 89.8 µs at 39 in
bf16 (16384 × 4096: 128 MB of Z′ read and 128 MB of Y written, 66 µs at env.json's 4.04 TB/s) and
14.0 at 33 (32 MB, 8 µs): four elements an item of a grid-stride loop, each item a 64-bit modulo
for its column, eight scalar loads of a and c, one 8-byte load of a 16-bit Z′.

A copy of the kernels (fusedlib.build.copy_kernels; the package's untouched) adds affine_rows_kernel
behind $FUSEDLIB_AFFINE_ROWS=R (read at each call; unset or 0: the package's kernel): thread t of
block (x, y) owns 8 columns, j0 = 8·(256·x + t), and keeps their a and c in registers; the block walks
rows R at a time (y·R, y·R + 1, …, then + gridDim.y·R), the R rows' 16-byte loads issued before any
store. Where M % 8 != 0 or a pointer is not 16-byte aligned, the package's kernel runs. Each element
is the package's expression (a·z + c, contracted to one FMA as nvcc does there), rounded by the same
store: Y must be the same bits (checked, in place as the package runs it and not).

Times the row pass (torch.profiler, 10 calls after an L2 flush each) in the fused train forward at
39's and 33's KernelBench shapes, bf16, fp16 and tf32 (float32 Z′ and Y), for the package's kernel
and R = 1, 2, 4, 8, against the DRAM floor at env.json's copy bandwidth. `python run239-affine.py copy`
writes the copy (once: a rewrite makes ninja rebuild it); `smoke` checks the bits on small and odd
shapes. Writes $OUT/run239-affine.csv; prints a table."""
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.course import ceilings
from fusedlib.lab.profiling import profile_kernels
from fusedlib.reference import PRESETS

from ab import apply_edits, eager_call, module_case, same_bits, with_env  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run239-affine")

KERNEL = """
// run239 draft: Y = a∘Z + c by rows. Thread t of block (x, y) owns columns j0 … j0 + 7 (j0 = 8·(256·x + t))
// and holds their a and c in registers; the block walks rows R at a time, the R rows' 16-byte loads
// (two of float32) first. Each element as affine_kernel's (coef[j] * z + c[j]). M % 8 == 0; z, y and
// coef 16-byte aligned (launch_affine checks).
template <int OP> __device__ __forceinline__ void load8(const float* base, size_t q, float (&v)[8]) {
  if constexpr (OP == OPERAND_FP32) {
    const float4 lo = reinterpret_cast<const float4*>(base + q)[0], hi = reinterpret_cast<const float4*>(base + q)[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
    const uint4 u = reinterpret_cast<const uint4*>(base)[q / 8];
    const auto* e = reinterpret_cast<const typename Element<OP>::T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = widen(e[i]);
  }
}
template <int OP> __device__ __forceinline__ void store8(float* base, size_t q, const float (&v)[8]) {
  if constexpr (OP == OPERAND_FP32) {
    reinterpret_cast<float4*>(base + q)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(base + q)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 u;
    auto* e = reinterpret_cast<typename Element<OP>::T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = narrow<OP>(v[i]);
    reinterpret_cast<uint4*>(base)[q / 8] = u;
  }
}
template <int OUT, int IN, int R>
__global__ void __launch_bounds__(256) affine_rows_kernel(const float* z, const float* __restrict__ coef, float* y,
                                                          int n, int m, long long* step) {
  if (blockIdx.y == 0) count_train_step(step);
  const int j0 = 8 * (blockIdx.x * 256 + threadIdx.x);
  if (j0 >= m) return;
  float a[8], c[8];
  const float4 a0 = reinterpret_cast<const float4*>(coef + j0)[0], a1 = reinterpret_cast<const float4*>(coef + j0)[1];
  const float4 c0 = reinterpret_cast<const float4*>(coef + m + j0)[0], c1 = reinterpret_cast<const float4*>(coef + m + j0)[1];
  a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
  c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
  for (int i0 = blockIdx.y * R; i0 < n; i0 += gridDim.y * R) {
    float v[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (i0 + r < n) load8<IN>(z, (size_t)(i0 + r) * m + j0, v[r]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (i0 + r >= n) continue;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[r][e] = a[e] * v[r][e] + c[e];
      store8<OUT>(y, (size_t)(i0 + r) * m + j0, v[r]);
    }
  }
}

inline int run239_rows() {
  const char* e = std::getenv("FUSEDLIB_AFFINE_ROWS");
  return e ? std::atoi(e) : 0;
}

inline const char* launch_affine(ZIn z, const float* coef, YOut y, int n, int m, long long* step, cudaStream_t st) {
  const int rows = run239_rows();
  if (rows > 0 && m % 8 == 0 && (uintptr_t)z.z % 16 == 0 && (uintptr_t)y.y % 16 == 0 && (uintptr_t)coef % 16 == 0) {
    const int gx = ceil_div(m, 8 * 256), gy = std::max(1, std::min(ceil_div(n, rows), ceil_div(sm_count() * 4, gx)));
    return with_row_types(y, z, [&](auto out, auto in) -> const char* {
      constexpr int O = decltype(out)::value, I = decltype(in)::value;
      const dim3 grid(gx, gy);
      if (rows == 1) affine_rows_kernel<O, I, 1><<<grid, 256, 0, st>>>(z.z, coef, y.y, n, m, step);
      else if (rows == 2) affine_rows_kernel<O, I, 2><<<grid, 256, 0, st>>>(z.z, coef, y.y, n, m, step);
      else if (rows <= 4) affine_rows_kernel<O, I, 4><<<grid, 256, 0, st>>>(z.z, coef, y.y, n, m, step);
      else affine_rows_kernel<O, I, 8><<<grid, 256, 0, st>>>(z.z, coef, y.y, n, m, step);
      FL_CHECK_LAUNCH();
      return nullptr;
    });
  }
  return launch_affine_items(z, coef, y, n, m, step, st);
}
"""

LAUNCH_OLD = "inline const char* launch_affine(ZIn z, const float* coef, YOut y, int n, int m, long long* step, cudaStream_t st) {"
LAUNCH_NEW = ("inline const char* launch_affine_items(ZIn z, const float* coef, YOut y, int n, int m, long long* step,\n"
              "                                       cudaStream_t st) {")
ANCHOR = "// Row softmax of V = a∘Z + c (coef == nullptr: V = Z), three passes over the row"


def affine_kernels(dest: Path) -> Path:
    """A copy of the kernels with affine_rows_kernel, chosen by $FUSEDLIB_AFFINE_ROWS."""
    copy_kernels(dest)
    apply_edits(dest, {"passes.cuh": [(LAUNCH_OLD, LAUNCH_NEW), (ANCHOR, KERNEL + "\n" + ANCHOR)]})
    return dest


PRECISIONS = ("bf16", "fp16", "tf32")
ROWS = ("1", "2", "4", "8")


def bits(package, copy, mod, x) -> dict:
    """Y and the buffers of the copy at each R (and unset) against the package's, bit for bit."""
    return same_bits(eager_call(package, mod, "tf32"),
                     {f"R={r}": with_env(eager_call(copy, mod, "tf32"), affine_rows=r) for r in ("0", *ROWS)}, x, mod.bn)


def smoke() -> None:
    """Bits on small and odd shapes (M % 8 != 0 takes the package's kernel), 33 and 39, each dtype."""
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    for problem, shape in (("33", (300, 64, 264)), ("39", (1000, 256, 4104)), ("33", (77, 64, 100)), ("39", (5, 32, 2056))):
        for precision in PRECISIONS:
            mod, x = module_case(problem, shape, precision)
            row = bits(package, copy, mod, x)
            print(problem, shape, precision, row, flush=True)
            assert all(row.values()), (problem, shape, precision, row)


def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    gbs = ceilings()["bandwidth"]  # env.json's copy bandwidth (GB/s)
    rows = []
    for problem in ("39", "33"):
        sh = PRESETS[problem]
        for precision in PRECISIONS:
            mod, x = module_case(problem, (sh.batch, sh.in_features, sh.out_features), precision)
            same = bits(package, copy, mod, x)
            z_bytes = 2 if precision != "tf32" else 4
            floor_us = 2 * sh.batch * sh.out_features * z_bytes / (gbs * 1e3)  # Z′ read, Y written
            for label, call in (("package", eager_call(package, mod, "tf32")),
                                *((f"rows R={r}", with_env(eager_call(copy, mod, "tf32"), affine_rows=r)) for r in ROWS)):
                with torch.no_grad():
                    ker = profile_kernels(call, x, calls=10)
                us = sum(t for name, _, t in ker if "affine" in name)
                r = label.split("=")[-1] if "=" in label else "0"
                rows.append(dict(problem=problem, precision=precision, variant=label, us=round(us, 1),
                                 floor_us=round(floor_us, 1), bit_identical=same[f"R={r}"]))
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run239-affine.csv", index=False)
    print(df.pivot_table(index="variant", columns=["problem", "precision"], values="us").round(1).to_string())
    print(df[["problem", "precision", "floor_us"]].drop_duplicates().to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:] == ["copy"]:
        affine_kernels(COPY)
    elif sys.argv[1:] == ["smoke"]:
        smoke()
    else:
        main()
