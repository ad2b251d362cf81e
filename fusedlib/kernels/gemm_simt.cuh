// SIMT mainloop: out(N×M) = X Wᵀ with exact fp32 products (FFMA), on every GPU (sm_75 on).
// Block tile BM×BN, K step BK, the next K step prefetched into registers; thread (ty, tx)
// owns rows ty + i·(BM/TM) and columns tx + j·(BN/TN), so shared-memory reads are
// broadcasts (A) and consecutive words (B): no bank conflicts. The finished accumulators go through the shared-memory C tile to the
// epilogue Epi (epilogue.cuh). grid = (ceil(M/BN), ceil(N/BM)).
#pragma once
#include "epilogue.cuh"

namespace fl {

template <int BM, int BN, int BK, int TM, int TN>
struct SimtTile {
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  static constexpr int kLda = BM + 32 / BK, kLdb = BN + 32 / BK;  // padded: transposing stores hit distinct banks
  static constexpr size_t kLoopSmem = (size_t)BK * (kLda + kLdb) * sizeof(float);
  static constexpr size_t kEpiSmem = epilogue_smem_bytes<BM, BN, kThreads>();
  static constexpr size_t kSmem = kLoopSmem > kEpiSmem ? kLoopSmem : kEpiSmem;
};

// At least 4 blocks of 256 threads an SM (64 registers a thread): the register budget is
// fixed, so the mainloop compiles to the same schedule whatever epilogue follows it (measured
// on the H100: 6.07 ms at 84 with each of the three epilogues; with 3 blocks, 80 registers,
// 6.28 to 6.43 ms, the epilogues changing the mainloop's schedule).
constexpr int kSimtMinBlocks = 4;

template <int BM, int BN, int BK, int TM, int TN, class Epi>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), kSimtMinBlocks)
simt_gemm_kernel(const Problem p, const float* __restrict__ x, const float* __restrict__ w, float* out) {
  using T = SimtTile<BM, BN, BK, TM, TN>;
  constexpr int THREADS = T::kThreads, RY = BM / TM, RX = BN / TN, LDA = T::kLda, LDB = T::kLdb;
  extern __shared__ float smem[];
  float* As = smem;             // [BK][LDA], K-major
  float* Bs = smem + BK * LDA;  // [BK][LDB]
  const int tid = threadIdx.x, tx = tid % RX, ty = tid / RX;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int K = p.k;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  // Register prefetch: each thread holds its LA + LB elements of the next K step while the
  // current one is multiplied, so global-memory latency overlaps the FFMAs. Thread tid loads
  // column kk = tid % BK of rows tid / BK + q·(THREADS / BK), q = 0 … LA − 1 (LB for W).
  static_assert(THREADS % BK == 0 && (BM * BK) % THREADS == 0 && (BN * BK) % THREADS == 0, "load tiling");
  constexpr int LA = BM * BK / THREADS, LB = BN * BK / THREADS, RSTEP = THREADS / BK;
  const int kk0 = tid % BK, r0 = tid / BK;
  const float* xa = x + (size_t)(m0 + r0) * K + kk0;
  const float* wb = w + (size_t)(n0 + r0) * K + kk0;
  float ra[LA], rb[LB];
  auto load = [&](int k0) {
    const bool in_k = k0 + kk0 < K;
#pragma unroll
    for (int q = 0; q < LA; ++q)
      ra[q] = (in_k && m0 + r0 + q * RSTEP < p.n) ? xa[(size_t)q * RSTEP * K + k0] : 0.f;
#pragma unroll
    for (int q = 0; q < LB; ++q)
      rb[q] = (in_k && n0 + r0 + q * RSTEP < p.m) ? wb[(size_t)q * RSTEP * K + k0] : 0.f;
  };
  auto stash = [&]() {  // K-major in shared memory
#pragma unroll
    for (int q = 0; q < LA; ++q) As[kk0 * LDA + r0 + q * RSTEP] = ra[q];
#pragma unroll
    for (int q = 0; q < LB; ++q) Bs[kk0 * LDB + r0 + q * RSTEP] = rb[q];
  };
  load(0);
  for (int k0 = 0; k0 < K; k0 += BK) {
    stash();
    __syncthreads();
    if (k0 + BK < K) load(k0 + BK);  // in flight during this step's FFMAs
    // Two-level accumulation: the BK products of this K step are summed into a fresh partial,
    // which is then added to the accumulator. A rounding error then grows with BK + K/BK
    // additions instead of K, which keeps Z accurate on columns with a large mean (offset
    // inputs, |mean|/std ≈ 1e3) where a single FFMA chain over K loses up to 3× more.
    float part[TM][TN];
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk * LDA + ty + i * RY];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk * LDB + tx + j * RX];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] = kk ? fmaf(a[i], b[j], part[i][j]) : a[i] * b[j];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] += part[i][j];
    __syncthreads();  // the last one also frees the loop buffers for C
  }
  constexpr int LDC = BN + 1;
  float* C = smem;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) C[(ty + i * RY) * LDC + tx + j * RX] = acc[i][j];
  __syncthreads();
  Epi::template apply<BM, BN, THREADS>(p, C, smem + BM * LDC, out, m0, n0, tid);
}

template <int BM, int BN, int BK, int TM, int TN, class Epi>
const char* launch_simt_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  using T = SimtTile<BM, BN, BK, TM, TN>;
  auto kernel = simt_gemm_kernel<BM, BN, BK, TM, TN, Epi>;
  FL_OPT_IN_SMEM(kernel, T::kSmem);
  const dim3 grid(ceil_div(p.m, BN), ceil_div(p.n, BM));
  kernel<<<grid, T::kThreads, T::kSmem, st>>>(p, x, w, out);
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl
