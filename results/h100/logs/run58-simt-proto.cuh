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
