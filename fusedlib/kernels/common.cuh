// fusedlib shared device helpers: the problem descriptor, reductions, the SIMT GEMM
// tile, the statistics epilogue, Chan's merge, BatchNorm coefficients and the row passes
// that more than one stage uses. Plain CUDA C++ (no torch headers), so that every stage
// file compiles on its own with nvcc. Algebra: fusedlib/algebra.py and DESIGN.md §3.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

namespace fl {

enum Precision { FP32 = 0, TF32 = 1, TF32X3 = 2 };

// Everything a stage needs; pointers are device pointers to contiguous float32 tensors.
struct Problem {
  const float* x;          // (N, K) input
  const float* w;          // (M, K) nn.Linear weight (or the eval-folded W')
  const float* bias;       // (M)    nn.Linear bias (or the eval-folded b')
  const float* scale;      // (1) for problem 84, (M) for 33/39
  const float* gamma;      // (M)    bn.weight
  const float* beta;       // (M)    bn.bias
  float* running_mean;     // (M)    bn.running_mean, updated in train mode
  float* running_var;      // (M)    bn.running_var, updated in train mode
  float* y;                // (N, M) output
  float* z;                // (N, M) workspace: Z = XWᵀ + b or Z' = XWᵀ
  float* part;             // (T, 2, M) per-row-tile partials: mean_t, M2_t
  float* coef;             // (4, M) a, c, then batch mean and variance scratch
  unsigned int* counters;  // (ceil(M / BN)) tile counters, zero between calls
  float* xsplit;           // (2, N, K) workspace for X's TF32 parts (fused 3xtf32), or null
  const float* wsplit;     // (2, M, K) W's TF32 parts [Wb; Ws] (fused 3xtf32), or null
  int n, k, m;             // batch N, in_features K, out_features M
  int kind;                // 84 or 33 (33 and 39)
  int training;            // 1: batch statistics and running-buffer update
  int precision;           // Precision
  int scale_len;           // 1 or M
  int use_wgmma;           // 1: the Hopper GEMM path may be used (sm_90a device)
  float eps;               // BatchNorm eps
  float momentum;          // this step's exponential-average factor
};

#define FL_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    cudaError_t fl_err_ = (expr);                       \
    if (fl_err_ != cudaSuccess) return cudaGetErrorString(fl_err_); \
  } while (0)
#define FL_CHECK_LAUNCH() FL_RETURN_IF_ERROR(cudaGetLastError())

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

__device__ __forceinline__ float scale_at(const Problem& p, int j) {
  return p.scale_len == 1 ? p.scale[0] : p.scale[j];
}

// ---------------------------------------------------------------- reductions
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum/max, fixed order (deterministic); `red` holds >= 32 floats; all threads get it.
template <bool IS_MAX>
__device__ float block_reduce(float v, float* red) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = IS_MAX ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : (IS_MAX ? -INFINITY : 0.f);
  r = IS_MAX ? warp_max(r) : warp_sum(r);
  return r;
}

// ---------------------------------------------------------------- statistics
// Partial moments of one column over a set of rows: count, mean, M2 = Σ(z − mean)².
struct Moments { float n, mean, m2; };

// Chan, Golub & LeVeque (1983): n = na + nb, δ = mb − ma, mean = ma + δ·nb/n,
// M2 = M2a + M2b + δ²·na·nb/n. Same expression order as algebra.chan_merge.
__device__ __forceinline__ Moments chan_merge(Moments a, Moments b) {
  const float n = a.n + b.n, d = b.mean - a.mean;
  return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
}

// Merge the T row-tile partials of column j in tile order 0, 1, …, T−1 (deterministic).
// L2-coherent loads (__ldcg): partials may have been written by other blocks of this grid.
__device__ Moments merge_column_partials(const Problem& p, int j, int tile_rows) {
  const int T = ceil_div(p.n, tile_rows);
  Moments acc = {(float)min(tile_rows, p.n), __ldcg(p.part + j), __ldcg(p.part + p.m + j)};
  for (int t = 1; t < T; ++t) {
    Moments b = {(float)min(tile_rows, p.n - t * tile_rows), __ldcg(p.part + (size_t)(2 * t) * p.m + j),
                 __ldcg(p.part + (size_t)(2 * t + 1) * p.m + j)};
    acc = chan_merge(acc, b);
  }
  return acc;
}

// Train mode, column j: coefficients a, c with V = a·Z + c from the batch mean and biased
// variance of the Z the stage holds (with bias if z_has_bias), then the running buffers.
// 84: a = sγ/√(σ²+ε), c = sβ − aμ.  33: a = γs/√(s²σ²+ε), c = β − aμ (s = 0 gives c = β).
// Running buffers track Z (84) or Z∘s (33); variance stored unbiased, ×N/(N−1).
__device__ void finalize_column(const Problem& p, int j, float mean, float var, bool z_has_bias) {
  const float s = scale_at(p, j), g = p.gamma[j], be = p.beta[j];
  float a, c;
  if (p.kind == 84) {
    a = s * g / sqrtf(var + p.eps);
    c = s * be - a * mean;
  } else {
    a = g * s / sqrtf(s * s * var + p.eps);
    c = be - a * mean;
  }
  p.coef[j] = a;
  p.coef[p.m + j] = c;
  float tm = z_has_bias ? mean : mean + p.bias[j], tv = var;
  if (p.kind != 84) { tm = s * tm; tv = s * s * tv; }
  const float mom = p.momentum;
  p.running_mean[j] = (1.f - mom) * p.running_mean[j] + mom * tm;
  p.running_var[j] = (1.f - mom) * p.running_var[j] + mom * (tv * ((float)p.n / (float)(p.n - 1)));
}

// Eval mode, column j: a, c with V = a·(XWᵀ + b) + c from the running buffers.
// 84: a = sγ/√(r_σ²+ε), c = sβ − a·r_μ.  33: a = γs/√(r_σ²+ε), c = β − γ·r_μ/√(r_σ²+ε).
__device__ void eval_column(const Problem& p, int j) {
  const float s = scale_at(p, j), g = p.gamma[j], be = p.beta[j];
  const float inv = 1.f / sqrtf(p.running_var[j] + p.eps), rm = p.running_mean[j];
  if (p.kind == 84) {
    const float a = s * g * inv;
    p.coef[j] = a;
    p.coef[p.m + j] = s * be - a * rm;
  } else {
    p.coef[j] = g * s * inv;
    p.coef[p.m + j] = be - g * rm * inv;
  }
}

// ---------------------------------------------------------------- column passes (naive, fold)
// Column mean of z (N×M): block (32, 8); threadIdx.x picks the column, rows strided by 8.
__global__ void column_mean_kernel(const float* __restrict__ z, float* __restrict__ mean, int n, int m) {
  __shared__ float red[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (j < m)
    for (int i = threadIdx.y; i < n; i += 8) s += z[(size_t)i * m + j];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < m) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += red[r][threadIdx.x];
    mean[j] = t / n;
  }
}

// Column biased variance Σ(z − mean)²/N, given the mean (second pass over z).
__global__ void column_var_kernel(const float* __restrict__ z, const float* __restrict__ mean,
                                  float* __restrict__ var, int n, int m) {
  __shared__ float red[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (j < m) {
    const float mu = mean[j];
    for (int i = threadIdx.y; i < n; i += 8) {
      const float d = z[(size_t)i * m + j] - mu;
      s += d * d;
    }
  }
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < m) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += red[r][threadIdx.x];
    var[j] = t / n;
  }
}

inline const char* launch_column_stats(const float* z, float* mean, float* var, int n, int m, cudaStream_t st) {
  const dim3 block(32, 8), grid(ceil_div(m, 32));
  column_mean_kernel<<<grid, block, 0, st>>>(z, mean, n, m);
  FL_CHECK_LAUNCH();
  column_var_kernel<<<grid, block, 0, st>>>(z, mean, var, n, m);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// ---------------------------------------------------------------- row passes
// Y = a∘Z + c, elementwise (problems 33/39); a = coef[0:M], c = coef[M:2M].
__global__ void affine_kernel(const float* __restrict__ z, const float* __restrict__ coef,
                              float* __restrict__ y, int n, int m) {
  const size_t total = (size_t)n * m;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  if ((m & 3) == 0) {  // 16-byte accesses
    const float4* z4 = reinterpret_cast<const float4*>(z);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total / 4; q += stride) {
      const int j = (int)((q * 4) % m);
      float4 v = z4[q];
      v.x = coef[j] * v.x + coef[m + j];
      v.y = coef[j + 1] * v.y + coef[m + j + 1];
      v.z = coef[j + 2] * v.z + coef[m + j + 2];
      v.w = coef[j + 3] * v.w + coef[m + j + 3];
      y4[q] = v;
    }
  } else {
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total; q += stride) {
      const int j = (int)(q % m);
      y[q] = coef[j] * z[q] + coef[m + j];
    }
  }
}

inline const char* launch_affine(const float* z, const float* coef, float* y, int n, int m, cudaStream_t st) {
  const size_t work = ((size_t)n * m + 3) / 4;
  const int blocks = (int)(work < 132 * 16 * 256 ? ceil_div((int)work, 256) : 132 * 16);
  affine_kernel<<<blocks, 256, 0, st>>>(z, coef, y, n, m);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// Row softmax of V = a∘Z + c (coef == nullptr: V = Z), three passes over the row
// (max, Σexp, normalize) held in shared memory when it fits (ROW_IN_SMEM), one block a row.
template <bool ROW_IN_SMEM>
__global__ void affine_softmax_rows_kernel(const float* __restrict__ z, const float* __restrict__ coef,
                                           float* __restrict__ y, int m) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const float* zr = z + (size_t)blockIdx.x * m;
  float* yr = y + (size_t)blockIdx.x * m;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = coef ? coef[j] * zr[j] + coef[m + j] : zr[j];
    if (ROW_IN_SMEM) row[j] = v;
    mx = fmaxf(mx, v);
  }
  mx = block_reduce<true>(mx, red);
  float l = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr[j] + coef[m + j] : zr[j]);
    l += expf(v - mx);
  }
  l = block_reduce<false>(l, red);
  const float inv = 1.f / l;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr[j] + coef[m + j] : zr[j]);
    yr[j] = expf(v - mx) * inv;
  }
}

constexpr int kMaxRowSmemBytes = 200 * 1024;

inline const char* launch_affine_softmax_rows(const float* z, const float* coef, float* y, int n, int m,
                                              cudaStream_t st) {
  const size_t bytes = (size_t)m * sizeof(float);
  if (bytes <= kMaxRowSmemBytes) {
    FL_RETURN_IF_ERROR(cudaFuncSetAttribute(affine_softmax_rows_kernel<true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    affine_softmax_rows_kernel<true><<<n, 512, bytes, st>>>(z, coef, y, m);
  } else {
    affine_softmax_rows_kernel<false><<<n, 512, 0, st>>>(z, coef, y, m);
  }
  FL_CHECK_LAUNCH();
  return nullptr;
}

// ---------------------------------------------------------------- GEMM tile epilogue
enum Epilogue {
  EPI_BIAS = 0,          // out = C + bias
  EPI_STATS = 1,         // out = C (Z'), plus the tile's column partials (mean_t, M2_t)
  EPI_STATS_LAST = 2,    // EPI_STATS, and the last block of each column block merges them
};

// After a block has written its tile's partials: count it on the column block's tile
// counter (fence first, no float atomics); the last block of the column block merges every
// row tile in order and finalizes the BatchNorm coefficients, then resets the counter.
// All THREADS threads of the block call it; flag is one word of shared memory.
template <int BM, int THREADS>
__device__ void finalize_if_last_block(const Problem& p, int n0, int cols, int col_block, int row_tiles,
                                       float* flag) {
  __threadfence();  // make this block's partials visible device-wide before counting it
  __syncthreads();
  int* is_last = reinterpret_cast<int*>(flag);
  if (threadIdx.x == 0) *is_last = atomicAdd(p.counters + col_block, 1u) == (unsigned)row_tiles - 1;
  __syncthreads();
  if (!*is_last) return;
  __threadfence();
  for (int cc = threadIdx.x; cc < cols; cc += THREADS) {
    const Moments mo = merge_column_partials(p, n0 + cc, BM);
    finalize_column(p, n0 + cc, mo.mean, mo.m2 / mo.n, false);
  }
  if (threadIdx.x == 0) p.counters[col_block] = 0;  // ready for the next call
}

// The block's BM×BN accumulator tile is in shared memory C (row stride BN + 1). Stores it
// to out (N×M) and, for the statistics epilogues, the tile's column partials: mean_t first,
// then M2_t = Σ(z − mean_t)² over the tile's valid rows (same order as algebra.tile_partials).
// With EPI_STATS_LAST the last block to finish a column block (tile counter + fence, no float
// atomics) merges all row tiles in order and finalizes the BatchNorm coefficients.
// col_block indexes the tile counters; row_tiles is the number of row tiles (blocks) per
// column block. Needs THREADS >= BN; red holds THREADS floats + 32. All THREADS threads call it.
template <int BM, int BN, int THREADS, int EPI>
__device__ void tile_epilogue(const Problem& p, const float* C, float* red, float* out,
                              const float* bias, int m0, int n0, int col_block, int row_tiles) {
  constexpr int LDC = BN + 1, R = THREADS / BN;  // R row groups; threads past R·BN only store
  static_assert(THREADS >= BN, "need a thread per column");
  const int tid = threadIdx.x;
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
  for (int idx = tid; idx < BM * BN; idx += THREADS) {
    const int r = idx / BN, c = idx % BN;
    if (r < rows && c < cols)
      out[(size_t)(m0 + r) * p.m + n0 + c] = C[r * LDC + c] + (EPI == EPI_BIAS ? bias[n0 + c] : 0.f);
  }
  if (EPI == EPI_BIAS) return;
  const int c = tid % BN, g = tid / BN;
  const bool active = g < R;
  float s = 0.f;
  if (active)
    for (int r = g; r < rows; r += R) s += C[r * LDC + c];
  if (active) red[g * BN + c] = s;
  __syncthreads();
  float mean = 0.f;
  if (active) {
    for (int q = 0; q < R; ++q) mean += red[q * BN + c];
    mean /= (float)rows;
  }
  __syncthreads();
  s = 0.f;
  if (active)
    for (int r = g; r < rows; r += R) {
      const float d = C[r * LDC + c] - mean;
      s += d * d;
    }
  if (active) red[g * BN + c] = s;
  __syncthreads();
  const int t = m0 / BM;
  if (g == 0 && c < cols) {
    float m2 = 0.f;
    for (int q = 0; q < R; ++q) m2 += red[q * BN + c];
    p.part[(size_t)(2 * t) * p.m + n0 + c] = mean;
    p.part[(size_t)(2 * t + 1) * p.m + n0 + c] = m2;
  }
  if (EPI == EPI_STATS_LAST) finalize_if_last_block<BM, THREADS>(p, n0, cols, col_block, row_tiles, red + THREADS);
}
// ---------------------------------------------------------------- SIMT fp32 GEMM
// out(N×M) = X Wᵀ (+ epilogue), exact fp32 products (FFMA). Block tile BM×BN, K step BK;
// thread (ty, tx) owns rows ty + i·(BM/TM) and columns tx + j·(BN/TN), so shared-memory
// reads are broadcasts (A) and consecutive words (B): no bank conflicts.
// grid = (ceil(M/BN), ceil(N/BM)); dynamic shared memory = simt_gemm_smem_bytes<…>().
template <int BM, int BN, int BK, int TM, int TN>
constexpr int simt_gemm_threads() { return (BM / TM) * (BN / TN); }

template <int BM, int BN, int BK, int TM, int TN>
constexpr size_t simt_gemm_smem_bytes() {
  constexpr size_t loop = (size_t)BK * (BM + BN + 64 / BK) * sizeof(float);
  constexpr size_t epi = ((size_t)(BM / TM + 1) * BN + 1) * sizeof(float);  // row-group sums, means, flag
  return loop > epi ? loop : epi;
}

template <int BM, int BN, int BK, int TM, int TN, int EPI>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
simt_gemm_kernel(Problem p, const float* __restrict__ x, const float* __restrict__ w, float* out) {
  constexpr int THREADS = (BM / TM) * (BN / TN), RY = BM / TM, RX = BN / TN;
  // K-major tiles, rows padded by 32/BK words so the transposing stores hit distinct banks.
  constexpr int LDA = BM + 32 / BK, LDB = BN + 32 / BK;
  extern __shared__ float smem[];
  float* As = smem;             // [BK][LDA]
  float* Bs = smem + BK * LDA;  // [BK][LDB]
  const int tid = threadIdx.x, tx = tid % RX, ty = tid / RX;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int K = p.k;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = tid; idx < BM * BK; idx += THREADS) {
      const int r = idx / BK, kk = idx % BK;
      As[kk * LDA + r] = (m0 + r < p.n && k0 + kk < K) ? x[(size_t)(m0 + r) * K + k0 + kk] : 0.f;
    }
    for (int idx = tid; idx < BN * BK; idx += THREADS) {
      const int r = idx / BK, kk = idx % BK;
      Bs[kk * LDB + r] = (n0 + r < p.m && k0 + kk < K) ? w[(size_t)(n0 + r) * K + k0 + kk] : 0.f;
    }
    __syncthreads();
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
    __syncthreads();
  }
  // Epilogue from registers: store the tile (+ bias), then for the statistics epilogues the
  // tile's column partials (mean_t over the valid rows, then M2_t about it; algebra.tile_partials),
  // reduced over the RY row groups through shared memory in a fixed order.
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int r = ty + i * RY, c = tx + j * RX;
      if (r < rows && c < cols)
        out[(size_t)(m0 + r) * p.m + n0 + c] = acc[i][j] + (EPI == EPI_BIAS ? p.bias[n0 + c] : 0.f);
    }
  if (EPI == EPI_BIAS) return;
  float* red = smem;              // [RY][BN] row-group sums (the main loop ended on a barrier)
  float* mean = smem + RY * BN;   // [BN]
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = tx + j * RX;
      const float mu = pass ? mean[c] : 0.f;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < TM; ++i)
        if (ty + i * RY < rows) {
          const float v = acc[i][j] - mu;
          sum += pass ? v * v : v;
        }
      red[ty * BN + c] = sum;
    }
    __syncthreads();
    for (int c = tid; c < BN; c += THREADS) {
      float total = 0.f;
      for (int y = 0; y < RY; ++y) total += red[y * BN + c];
      if (pass == 0) {
        mean[c] = total / (float)rows;
      } else if (c < cols) {
        const int t = m0 / BM;
        p.part[(size_t)(2 * t) * p.m + n0 + c] = mean[c];
        p.part[(size_t)(2 * t + 1) * p.m + n0 + c] = total;
      }
    }
    __syncthreads();
  }
  if (EPI == EPI_STATS_LAST) finalize_if_last_block<BM, THREADS>(p, n0, cols, blockIdx.x, gridDim.y, mean + BN);
}

template <int BM, int BN, int BK, int TM, int TN, int EPI>
const char* launch_simt_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  constexpr size_t smem = simt_gemm_smem_bytes<BM, BN, BK, TM, TN>();
  auto kernel = simt_gemm_kernel<BM, BN, BK, TM, TN, EPI>;
  FL_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid(ceil_div(p.m, BN), ceil_div(p.n, BM));
  kernel<<<grid, simt_gemm_threads<BM, BN, BK, TM, TN>(), smem, st>>>(p, x, w, out);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// The teaching stages' GEMM tile (naive, fold, sums): 64×64, K step 16, 4×4 per thread.
#define FL_GEMM64 64, 64, 16, 4, 4

}  // namespace fl
