// SIMT mainloop: out(N×M) = X Wᵀ with exact fp32 products (FFMA), on every GPU (sm_75 on).
// Block tile BM×BN, K step BK; thread (ty, tx) owns TM×TN outputs as (TM/4)×(TN/4) quadrants
// of 4×4 (rows q·BM/(TM/4) + 4ty + i, columns q·BN/(TN/4) + 4tx + j), so each K step it reads
// its operands as float4 (LDS.128): a warp's A reads are broadcasts and its B reads
// consecutive float4, with no bank conflicts, and 8×8 outputs give 64 FFMAs per 16 operands.
// Global loads are float4 along K when K % 4 == 0 and the operand rows are 16-byte aligned
// (scalar loads of the same elements otherwise). Two shared-memory stages: the next K step is
// loaded into registers during this step's FFMAs and stored into the other stage, one
// __syncthreads a K step. The finished accumulators go through the shared-memory C tile to
// the epilogue Epi (epilogue.cuh). In train mode at fp32 the A tile's rows other than X's row
// 0 (all of them with an external x₀) go to shared memory minus x₀, p.x0 (the first-row shift,
// common.cuh). grid = (ceil(M/BN), ceil(N/BM), S) (past kMaxGridY row tiles, several launches
// from row tile tile0: common.cuh): with split-K (SPLITK, p.splits = S > 1, where even 32×32
// tiles leave SMs idle: simt_split_k, gemm.cuh) block z runs its range of the K steps and the
// tile's last split sums the S partial tiles in split order before the epilogue (sum_splits).
// The ladder of SIMT SGEMM kernels this follows: siboehm, "How to optimize a CUDA matmul
// kernel" (SGEMM_CUDA).
#pragma once
#include "epilogue.cuh"

namespace fl {

template <int BM, int BN, int BK, int TM, int TN>
struct SimtTile {
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  static constexpr int kLda = BM + 4, kLdb = BN + 4;  // padded, float4-aligned: transposing stores spread over banks
  static constexpr size_t kLoopSmem = (size_t)2 * BK * (kLda + kLdb) * sizeof(float);
  static constexpr size_t kEpiSmem = epilogue_smem_bytes<BM, BN, kThreads>();
  static constexpr size_t kSmem = kLoopSmem > kEpiSmem ? kLoopSmem : kEpiSmem;
};

// Four consecutive elements s[0 … 3] of a row, those at columns k … k + 3 below K (zeros past
// it): one LDG.128 when vec, four scalar loads otherwise.
__device__ __forceinline__ float4 simt_load4(const float* __restrict__ s, int k, int K, bool vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (vec) {
    if (k < K) v = __ldg(reinterpret_cast<const float4*>(s));
  } else {
    v.x = k < K ? __ldg(s) : 0.f;
    v.y = k + 1 < K ? __ldg(s + 1) : 0.f;
    v.z = k + 2 < K ? __ldg(s + 2) : 0.f;
    v.w = k + 3 < K ? __ldg(s + 3) : 0.f;
  }
  return v;
}

// One K step (columns k0 … k0 + BK − 1) of a ROWS-row operand tile from row r0 of src
// (row-major, leading dimension K, `rows` rows in all) into registers: thread tid holds the
// float4 groups f = tid + q·THREADS of the tile in row-major order (row f / (BK/4), columns
// 4·(f % (BK/4)) …); zeros outside.
template <int ROWS, int BK, int THREADS>
__device__ __forceinline__ void simt_load(float (&r)[ROWS * BK / THREADS], const float* __restrict__ src, int r0,
                                          int rows, int K, int k0, int tid, bool vec) {
#pragma unroll
  for (int q = 0; q < ROWS * BK / THREADS / 4; ++q) {
    const int f = tid + q * THREADS, row = r0 + f / (BK / 4), k = k0 + (f % (BK / 4)) * 4;
    const float4 v = row < rows ? simt_load4(src + (size_t)row * K + k, k, K, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
    r[4 * q] = v.x, r[4 * q + 1] = v.y, r[4 * q + 2] = v.z, r[4 * q + 3] = v.w;
  }
}

// The first-row shift (common.cuh) on the registers of simt_load: the tile's rows below `rows`,
// but X's row 0 where the shift keeps it (keep0: common.cuh shift_keeps_row0), minus x₀, the four
// elements of the shift row at this thread's columns (the same for every group q, as THREADS is
// a multiple of BK/4). Done when the registers go to shared memory, so the loads stay in flight
// under the K step's FFMAs.
template <int ROWS, int BK, int THREADS>
__device__ __forceinline__ void simt_shift(float (&r)[ROWS * BK / THREADS], float4 x0, int r0, int rows, bool keep0,
                                           int tid) {
  static_assert(THREADS % (BK / 4) == 0, "a thread's groups share their columns");
#pragma unroll
  for (int q = 0; q < ROWS * BK / THREADS / 4; ++q) {
    const int row = r0 + (tid + q * THREADS) / (BK / 4);
    if ((row > 0 || !keep0) && row < rows) r[4 * q] -= x0.x, r[4 * q + 1] -= x0.y, r[4 * q + 2] -= x0.z, r[4 * q + 3] -= x0.w;
  }
}

// The registers of simt_load into shared memory, K-major: dst[k][row], leading dimension LD.
template <int ROWS, int BK, int THREADS, int LD>
__device__ __forceinline__ void simt_stash(const float (&r)[ROWS * BK / THREADS], float* dst, int tid) {
#pragma unroll
  for (int q = 0; q < ROWS * BK / THREADS; ++q) {
    const int e = (tid + (q / 4) * THREADS) * 4 + q % 4;  // row-major index in the tile
    dst[(e % BK) * LD + e / BK] = r[q];
  }
}

// Thread tile TM×TN of 4×4 quadrants; MIN_BLOCKS fixes the register budget, so the mainloop
// compiles to the same schedule whatever epilogue follows it.
template <int BM, int BN, int BK, int TM, int TN, int MIN_BLOCKS, class Epi, bool SPLITK>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS)
simt_gemm_kernel(const Problem p, const float* __restrict__ x, const float* __restrict__ w, float* out, bool vec,
                 int tile0) {
  using T = SimtTile<BM, BN, BK, TM, TN>;
  constexpr int THREADS = T::kThreads, LDA = T::kLda, LDB = T::kLdb, QM = TM / 4, QN = TN / 4, RX = BN / TN;
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "4×4 quadrants, float4 along K");
  static_assert((BM * BK) % (4 * THREADS) == 0 && (BN * BK) % (4 * THREADS) == 0, "load tiling");
  constexpr int LA = BM * BK / THREADS, LB = BN * BK / THREADS;
  extern __shared__ __align__(16) float smem[];
  float* As = smem;                 // [2][BK][LDA], K-major
  float* Bs = smem + 2 * BK * LDA;  // [2][BK][LDB]
  const int tid = threadIdx.x, tx = tid % RX, ty = tid / RX;
  const int n0 = blockIdx.x * BN, m0 = (tile0 + (int)blockIdx.y) * BM;
  const int K = p.k;

  float ra[LA], rb[LB];
  float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f);  // the first-row shift: x₀ (p.x0) at this thread's columns
  const bool shift = p.z0 != nullptr;
  auto load = [&](int k0) {
    simt_load<BM, BK, THREADS>(ra, x, m0, p.n, K, k0, tid, vec);
    simt_load<BN, BK, THREADS>(rb, w, n0, p.m, K, k0, tid, vec);
    const int kx = k0 + (tid % (BK / 4)) * 4;
    if (shift) x0 = simt_load4(p.x0 + kx, kx, K, vec);
  };
  auto stash = [&](int s) {
    if (shift) simt_shift<BM, BK, THREADS>(ra, x0, m0, p.n, shift_keeps_row0(p), tid);
    simt_stash<BM, BK, THREADS, LDA>(ra, As + s * BK * LDA, tid);
    simt_stash<BN, BK, THREADS, LDB>(rb, Bs + s * BK * LDB, tid);
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  const int KT = ceil_div(K, BK), S = SPLITK ? p.splits : 1, split = SPLITK ? blockIdx.z : 0;
  const int t0 = split_begin(split, S, KT), steps = split_begin(split + 1, S, KT);
  load(t0 * BK);
  stash(0);
  __syncthreads();
  for (int t = t0; t < steps; ++t) {
    const float* a = As + ((t - t0) & 1) * BK * LDA;
    const float* b = Bs + ((t - t0) & 1) * BK * LDB;
    if (t + 1 < steps) load((t + 1) * BK);  // in flight during this step's FFMAs
    // Two-level accumulation: the BK products of this K step are summed into a fresh partial,
    // which is then added to the accumulator. A rounding error then grows with BK + K/BK
    // additions instead of K, which keeps Z accurate on columns with a large mean (offset
    // inputs, |mean|/std ≈ 1e3) where a single FFMA chain over K loses up to 3× more.
    float part[TM][TN];
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int q = 0; q < QM; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(a + kk * LDA + q * (BM / QM) + 4 * ty);
        av[4 * q] = v.x, av[4 * q + 1] = v.y, av[4 * q + 2] = v.z, av[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < QN; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(b + kk * LDB + q * (BN / QN) + 4 * tx);
        bv[4 * q] = v.x, bv[4 * q + 1] = v.y, bv[4 * q + 2] = v.z, bv[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] = kk ? fmaf(av[i], bv[j], part[i][j]) : av[i] * bv[j];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] += part[i][j];
    if (t + 1 < steps) stash((t + 1 - t0) & 1);  // the other stage: last read before the previous barrier
    __syncthreads();  // the last one also frees the loop buffers for C
  }
  if constexpr (SPLITK) {
    __shared__ int last;
    if (!sum_splits<TM * TN, THREADS>(p, reinterpret_cast<float(&)[TM * TN]>(acc),
                                      (tile0 + blockIdx.y) * gridDim.x + blockIdx.x, split, &last, tid))
      return;  // not the tile's last split: its partial tile is in p.splitk
  }
  constexpr int LDC = BN + 1;
  float* C = smem;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int r = (i / 4) * (BM / QM) + 4 * ty + i % 4, c = (j / 4) * (BN / QN) + 4 * tx + j % 4;
      C[r * LDC + c] = take_shift_row(p, acc[i][j], m0 + r, n0 + c);
    }
  __syncthreads();
  Epi::template apply<BM, BN, THREADS, OPERAND_FP32>(p, C, smem + BM * LDC, out, m0, n0, tid);
}

// SPLITK is compiled for the 32×32 tile only (the one tile whose grid may leave SMs idle).
template <int BM, int BN, int BK, int TM, int TN, int MIN_BLOCKS, class Epi, bool SPLITK = false>
const char* launch_simt_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  using T = SimtTile<BM, BN, BK, TM, TN>;
  auto kernel = simt_gemm_kernel<BM, BN, BK, TM, TN, MIN_BLOCKS, Epi, SPLITK>;
  FL_OPT_IN_SMEM(kernel, T::kSmem);
  const bool vec = p.k % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0 &&
                   (!p.z0 || (uintptr_t)p.x0 % 16 == 0);  // (x₀: X's row 0, or an external row)
  // kMaxGridY row tiles a launch (split-K runs on fewer than kMinGrid tiles: one launch)
  const int rows = ceil_div(p.n, BM);
  for (int t0 = 0; t0 < rows; t0 += kMaxGridY) {
    const dim3 grid(ceil_div(p.m, BN), std::min(rows - t0, kMaxGridY), SPLITK ? p.splits : 1);
    kernel<<<grid, T::kThreads, T::kSmem, st>>>(p, x, w, out, vec, t0);
    FL_CHECK_LAUNCH();
  }
  return nullptr;
}

}  // namespace fl
