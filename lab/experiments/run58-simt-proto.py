"""run58: the SIMT mainloop prototype (KERNEL below) against cuBLAS SGEMM and the engine's
SIMT GEMM (the naive stage's fp32 GEMM kernel, torch.profiler) in one process.

For each variant (BM×BN tile, BK, FLUSH K steps a partial, VEC float4 loads): correctness first
(normwise relative error against float64 on randn and offset inputs, odd shapes for the scalar-load
path, NaN poisoned outputs), then time at the KernelBench shapes (fusedlib.lab.bench.time_round_robin: L2 flush, CUDA events,
50 calls each in 10 rounds). Prints a table; run from the repository root with PYTHONPATH=. and the
engine's build cache in $FUSEDLIB_CACHE."""
import statistics
import sys

import torch
from torch.utils.cpp_extension import load_inline

from fusedlib.lab import bench

# (BM, BN, BK, FLUSH); FLUSH 1 << 20: one partial for the whole K loop, i.e. single-level accumulation
# (what the two-level scheme costs in FADDs and registers)
VARIANTS = [(128, 128, 16, 1), (128, 128, 16, 2), (128, 128, 32, 1), (128, 64, 16, 1), (128, 128, 8, 2),
            (128, 128, 16, 1 << 20)]

KERNEL = r"""
// run58: a prototype of a faster SIMT (FFMA) mainloop for the fp32 path, standalone (not part of the
// engine): out(N×M) = X Wᵀ, X (N×K) and W (M×K) row-major float32, out row-major.
//
// Against the engine's gemm_simt.cuh (64×64 tiles, 4×4 outputs a thread, scalar loads, one shared-memory
// stage; 5.95 ms at 84 against cuBLAS SGEMM's 2.68 ms, run53 profile):
//   * 128×128 block tile, 8×8 outputs a thread as 2×2 quadrants of 4×4 (rows ty·4 + i and BM/2 + ty·4 + i,
//     columns tx·4 + j and BN/2 + tx·4 + j): per K step a thread reads its 8 + 8 operands as four LDS.128,
//     a warp's A reads are broadcasts and its B reads consecutive float4 (no bank conflicts), 64 FFMAs per
//     16 operands instead of 16 per 8;
//   * global loads as float4 along K (VEC: K % 4 == 0 and 16-B aligned rows), scalar otherwise;
//   * two shared-memory stages, the next K step's loads in registers during this step's FFMAs: one
//     __syncthreads a K step;
//   * the engine's two-level accumulation kept (FLUSH K steps, FLUSH·BK products, summed into a fresh
//     partial that is then added to the accumulator: rounding grows with FLUSH·BK + K/(FLUSH·BK)
//     additions instead of K; offset inputs, DESIGN.md §5).
// The epilogue here stores the accumulators straight to global memory; the engine's goes through the
// shared-memory C tile to the stage's epilogue (epilogue.cuh).
#pragma once
#include <cuda_runtime.h>

namespace proto {

template <int BM, int BN, int BK>
struct SgemmTile {
  static constexpr int kThreads = (BM / 8) * (BN / 8);
  static constexpr int kLda = BM + 4, kLdb = BN + 4;  // keeps float4 alignment; 2-way conflicts on the stores only
  static constexpr size_t kSmem = (size_t)2 * BK * (kLda + kLdb) * sizeof(float);
};

// One K step (columns k0 … k0 + BK − 1) of a ROWS-row operand tile starting at row r0 of src (row-major,
// leading dimension K, `rows` rows in all) into registers: thread tid holds the elements tid + q·THREADS
// of the tile in row-major order, as float4 when VEC (K % 4 == 0, 16-B aligned rows); zeros outside.
template <int ROWS, int BK, int THREADS, bool VEC>
__device__ __forceinline__ void load_tile(float (&r)[ROWS * BK / THREADS], const float* __restrict__ src, int r0,
                                          int rows, int K, int k0, int tid) {
  if constexpr (VEC) {
#pragma unroll
    for (int q = 0; q < ROWS * BK / THREADS / 4; ++q) {
      const int f = tid + q * THREADS, row = r0 + f / (BK / 4), k = k0 + (f % (BK / 4)) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < rows && k < K) v = __ldg(reinterpret_cast<const float4*>(src + (size_t)row * K + k));
      r[4 * q] = v.x, r[4 * q + 1] = v.y, r[4 * q + 2] = v.z, r[4 * q + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int q = 0; q < ROWS * BK / THREADS; ++q) {
      const int e = tid + q * THREADS, row = r0 + e / BK, k = k0 + e % BK;
      r[q] = (row < rows && k < K) ? __ldg(src + (size_t)row * K + k) : 0.f;
    }
  }
}

// The registers of load_tile into shared memory, K-major: dst[k][row] with leading dimension LD.
template <int ROWS, int BK, int THREADS, bool VEC, int LD>
__device__ __forceinline__ void stash_tile(const float (&r)[ROWS * BK / THREADS], float* dst, int tid) {
#pragma unroll
  for (int q = 0; q < ROWS * BK / THREADS; ++q) {
    const int e = VEC ? (tid + (q / 4) * THREADS) * 4 + q % 4 : tid + q * THREADS;  // row-major index in the tile
    dst[(e % BK) * LD + e / BK] = r[q];
  }
}

template <int BM, int BN, int BK, int FLUSH, bool VEC>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), 1)
sgemm_nt_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int N, int K,
                int M) {
  using T = SgemmTile<BM, BN, BK>;
  constexpr int THREADS = T::kThreads, LDA = T::kLda, LDB = T::kLdb, TX = BN / 8;
  static_assert(BM % 64 == 0 && BN % 64 == 0 && BK % 4 == 0, "tile shape");
  static_assert((BM * BK) % (4 * THREADS) == 0 && (BN * BK) % (4 * THREADS) == 0, "load tiling");
  // Operand elements a thread loads per K step (as LA/4 float4 when VEC).
  constexpr int LA = BM * BK / THREADS, LB = BN * BK / THREADS;
  extern __shared__ __align__(16) float smem[];
  float* As = smem;                 // [2][BK][LDA]
  float* Bs = smem + 2 * BK * LDA;  // [2][BK][LDB]
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;

  float ra[LA], rb[LB];
  auto load = [&](int k0) {
    load_tile<BM, BK, THREADS, VEC>(ra, x, m0, N, K, k0, tid);
    load_tile<BN, BK, THREADS, VEC>(rb, w, n0, M, K, k0, tid);
  };
  auto stash = [&](int s) {
    stash_tile<BM, BK, THREADS, VEC, LDA>(ra, As + s * BK * LDA, tid);
    stash_tile<BN, BK, THREADS, VEC, LDB>(rb, Bs + s * BK * LDB, tid);
  };

  float acc[8][8], part[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  const int steps = (K + BK - 1) / BK;
  load(0);
  stash(0);
  __syncthreads();
  for (int t = 0; t < steps; ++t) {
    const int s = t & 1;
    if (t + 1 < steps) load((t + 1) * BK);  // in flight during this step's FFMAs
    if (t % FLUSH == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) part[i][j] = 0.f;
    }
    const float* a = As + s * BK * LDA;
    const float* b = Bs + s * BK * LDB;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[8], bv[8];
      const float4 a0 = *reinterpret_cast<const float4*>(a + kk * LDA + ty * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(a + kk * LDA + BM / 2 + ty * 4);
      const float4 b0 = *reinterpret_cast<const float4*>(b + kk * LDB + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(b + kk * LDB + BN / 2 + tx * 4);
      av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w, av[4] = a1.x, av[5] = a1.y, av[6] = a1.z, av[7] = a1.w;
      bv[0] = b0.x, bv[1] = b0.y, bv[2] = b0.z, bv[3] = b0.w, bv[4] = b1.x, bv[5] = b1.y, bv[6] = b1.z, bv[7] = b1.w;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
    }
    if ((t + 1) % FLUSH == 0 || t + 1 == steps) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += part[i][j];
    }
    if (t + 1 < steps) stash(s ^ 1);  // the other stage: last read before the previous barrier
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
    if (row >= N) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = n0 + h * (BN / 2) + tx * 4;
      float* o = out + (size_t)row * M + col;
      if (VEC && (M % 4 == 0) && col + 3 < M) {
        *reinterpret_cast<float4*>(o) = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (col + j < M) o[j] = acc[i][4 * h + j];
      }
    }
  }
}

template <int BM, int BN, int BK, int FLUSH, bool VEC>
cudaError_t launch_sgemm_nt(const float* x, const float* w, float* out, int N, int K, int M, cudaStream_t st) {
  using T = SgemmTile<BM, BN, BK>;
  auto kernel = sgemm_nt_kernel<BM, BN, BK, FLUSH, VEC>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid((M + BN - 1) / BN, (N + BM - 1) / BM);
  kernel<<<grid, T::kThreads, T::kSmem, st>>>(x, w, out, N, K, M);
  return cudaGetLastError();
}

}  // namespace proto
"""

binding = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
""" + KERNEL + r"""
template <int BM, int BN, int BK, int FLUSH>
cudaError_t launch(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& out, bool vec) {
  const int N = x.size(0), K = x.size(1), M = w.size(0);
  cudaStream_t st = c10::cuda::getCurrentCUDAStream();
  if (vec) return proto::launch_sgemm_nt<BM, BN, BK, FLUSH, true>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                                   out.data_ptr<float>(), N, K, M, st);
  return proto::launch_sgemm_nt<BM, BN, BK, FLUSH, false>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                            out.data_ptr<float>(), N, K, M, st);
}

torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, bool poison) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat,
              "x, w: float32 CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "x (N, K), w (M, K) contiguous");
  auto out = poison ? torch::full({x.size(0), w.size(0)}, NAN, x.options()) : torch::empty({x.size(0), w.size(0)}, x.options());
  const bool vec = x.size(1) % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0;
  cudaError_t err;
  switch (variant) {
    case 0: err = launch<128, 128, 16, 1>(x, w, out, vec); break;
    case 1: err = launch<128, 128, 16, 2>(x, w, out, vec); break;
    case 2: err = launch<128, 128, 32, 1>(x, w, out, vec); break;
    case 3: err = launch<128, 64, 16, 1>(x, w, out, vec); break;
    case 4: err = launch<128, 128, 8, 2>(x, w, out, vec); break;
    case 5: err = launch<128, 128, 16, 1 << 20>(x, w, out, vec); break;
    default: TORCH_CHECK(false, "variant: 0..5");
  }
  TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  return out;
}
"""
ext = load_inline("run58_simt_proto", cpp_sources="torch::Tensor sgemm(torch::Tensor x, torch::Tensor w, int64_t variant, bool poison);",
                  cuda_sources=binding, functions=["sgemm"], extra_cuda_cflags=["-O3", "-Xptxas=-v"], verbose=False)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def inputs(n, k, m, kind, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(m, k, generator=g) / k ** 0.5
    if kind == "offset":
        x = torch.randn(1, k, generator=g, dtype=torch.float64) + 1e-3 * torch.randn(n, k, generator=g, dtype=torch.float64)
        x = x.float()
    else:
        x = torch.randn(n, k, generator=g)
    return x.to(dev), w.to(dev)


print("== correctness (normwise relative error against float64; cuBLAS fp32 beside)")
bad = 0
for shape in [(7, 33, 65), (257, 1000, 999), (1000, 999, 1001), (129, 64, 130), (1024, 8192, 8192)]:
    for kind in ("randn", "offset"):
        x, w = inputs(*shape, kind)
        want = x.double() @ w.double().t()
        ref = rel(x @ w.t(), want)
        errs = []
        for v in range(len(VARIANTS)):
            y = ext.sgemm(x, w, v, True)
            e = rel(y, want) if torch.isfinite(y).all() else float("nan")
            errs.append(e)
            bad += VARIANTS[v][3] < 1 << 20 and not (e <= max(2 * ref, 1e-6))
        print(f"{shape[0]}x{shape[1]}->{shape[2]:<6} {kind:6s} cuBLAS {ref:.2e}  ours " + " ".join(f"{e:.2e}" for e in errs))
# an input not 16-B aligned: the scalar-load path
x, w = inputs(256, 516, 260, "randn")
xs = torch.empty(256 * 516 + 1, device=dev)[1:].view(256, 516).copy_(x)
e = rel(ext.sgemm(xs, w, 0, True), x.double() @ w.double().t())
print(f"offset pointer (scalar loads): {e:.2e}")
bad += not (e < 1e-6)
print(f"correctness: {bad} failures")

def engine_simt_ms(n, k, m):
    """The engine's SIMT GEMM kernel time (the naive stage's fp32 GEMM), torch.profiler."""
    try:
        import fusedlib
        from fusedlib.reference import make_reference
        from torch.profiler import ProfilerActivity, profile
        mod = fusedlib.from_reference(make_reference("84", k, m, seed=0).to(dev).eval(), stage="naive", precision="fp32")
        x = torch.randn(n, k, device=dev)
        with torch.no_grad():
            for _ in range(3):
                mod(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    mod(x)
                torch.cuda.synchronize()
        ts = [e.device_time for e in prof.events() if "simt_gemm_kernel" in e.name]
        return statistics.median(ts) / 1e3 if ts else float("nan")
    except Exception as exc:  # the engine is a comparison only
        print("engine:", exc)
        return float("nan")


print("\n== time (ms, median of 50 in 10 rounds, L2 flushed); TFLOP/s in brackets")
rows = []
for n, k, m in [(1024, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096), (128, 1024, 512)]:
    x, w = inputs(n, k, m, "randn")
    flops = 2 * n * k * m
    fns = {"cublas": (lambda x: x @ w.t(), "fp32")}
    fns.update({f"v{v}": (lambda x, v=v: ext.sgemm(x, w, v, False), None) for v in range(len(VARIANTS))})
    t = bench.time_round_robin(fns, x, iters=50, rounds=10)   # the harness's protocol: L2 flush, events, rounds
    cub, ours = t["cublas"][0], [t[f"v{v}"][0] for v in range(len(VARIANTS))]
    eng = engine_simt_ms(n, k, m)
    rows.append((f"{n}x{k}->{m}", cub, eng, ours))
    print(f"{n}x{k}->{m}: cuBLAS {cub:.3f} ({flops / cub / 1e9:.1f})  engine {eng:.3f}  " +
          "  ".join(f"v{v} {t:.3f} ({flops / t / 1e9:.1f})" for v, t in enumerate(ours)))

print("\nvariants: " + ", ".join(f"v{i} = {bm}x{bn} BK {bk} FLUSH {f}" for i, (bm, bn, bk, f) in enumerate(VARIANTS)))
print("| shape | cuBLAS | engine today | " + " | ".join(f"v{i}" for i in range(len(VARIANTS))) + " | best / cuBLAS |")
print("|---|---|---|" + "---|" * len(VARIANTS) + "---|")
for shape, cub, eng, ours in rows:
    print(f"| {shape} | {cub:.3f} | {eng:.3f} | " + " | ".join(f"{t:.3f}" for t in ours) + f" | {min(ours) / cub:.2f} |")
sys.exit(1 if bad else 0)
