// Shared passes over a whole N×M tensor, launched after the GEMM by the stages that need
// them: column statistics in two passes (naive, fold), the affine Y = a∘Z + c (33/39) and
// the row softmax of V = a∘Z + c (84) in three passes (fold, sums) or online (fused).
// The row passes may run in place (z == y, as every stage runs them: Z lives in Y's memory),
// since each element is read before it is written, by the thread that writes it; and, as the
// last kernel of a train step, they count it (num_batches_tracked += 1; nullptr: eval).
// Specification: fusedlib/algebra.py (column_stats_two_pass, softmax_three_pass, softmax_online).
#pragma once
#include "common.cuh"

namespace fl {

// ---------------------------------------------------------------- column statistics (naive, fold)
// One column moment of z (N×M) per thread column, block (32, 8): threadIdx.x picks the
// column, rows strided by 8, the 8 row sums added in order. VARIANCE = false: the mean
// Σz/N; true: the biased variance Σ(z − mean)²/N, given the mean (a second pass over z).
template <bool VARIANCE>
__global__ void column_moment_kernel(const float* __restrict__ z, const float* __restrict__ mean,
                                     float* __restrict__ out, int n, int m) {
  __shared__ float red[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (j < m) {
    const float mu = VARIANCE ? mean[j] : 0.f;
    for (int i = threadIdx.y; i < n; i += 8) {
      const float d = z[(size_t)i * m + j] - mu;
      s += VARIANCE ? d * d : d;
    }
  }
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < m) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += red[r][threadIdx.x];
    out[j] = t / n;
  }
}

inline const char* launch_column_stats(const float* z, float* mean, float* var, int n, int m, cudaStream_t st) {
  const dim3 block(32, 8), grid(ceil_div(m, 32));
  column_moment_kernel<false><<<grid, block, 0, st>>>(z, nullptr, mean, n, m);
  FL_CHECK_LAUNCH();
  column_moment_kernel<true><<<grid, block, 0, st>>>(z, mean, var, n, m);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// ---------------------------------------------------------------- row passes (fold, sums, fused)
// Y = a∘Z + c, elementwise (problems 33/39); a = coef[0:M], c = coef[M:2M].
__global__ void affine_kernel(const float* z, const float* __restrict__ coef, float* y, int n, int m,
                              long long* step) {
  count_train_step(step);
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

inline const char* launch_affine(const float* z, const float* coef, float* y, int n, int m, long long* step,
                                 cudaStream_t st) {
  const size_t work = ((size_t)n * m + 3) / 4;
  const int blocks = (int)(work < 132 * 16 * 256 ? ceil_div((int)work, 256) : 132 * 16);
  affine_kernel<<<blocks, 256, 0, st>>>(z, coef, y, n, m, step);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// Row softmax of V = a∘Z + c (coef == nullptr: V = Z), three passes over the row
// (max, Σexp, normalize) held in shared memory when it fits (ROW_IN_SMEM), one block a row.
template <bool ROW_IN_SMEM>
__global__ void affine_softmax_rows_kernel(const float* z, const float* __restrict__ coef, float* y, int m,
                                           long long* step) {
  extern __shared__ float row[];
  __shared__ float red[32];
  count_train_step(step);
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

// Rows up to 200 KB (M ≤ 51200) stay in shared memory where the device allows it.
constexpr int kMaxRowSmemBytes = 200 * 1024;
inline bool row_fits_smem(size_t bytes) {
  return bytes <= (size_t)kMaxRowSmemBytes && bytes + 1024 <= (size_t)max_smem_optin();
}

constexpr int kRowThreads = 512;

// One block of kRowThreads threads a row; the row in shared memory (in_smem) when it fits, else
// re-read from global memory (in_global). Both row-softmax passes launch through here.
using RowKernel = void (*)(const float*, const float*, float*, int, long long*);
inline const char* launch_rows(RowKernel in_smem, RowKernel in_global, const float* z, const float* coef, float* y,
                               int n, int m, long long* step, cudaStream_t st) {
  const size_t bytes = (size_t)m * sizeof(float);
  if (row_fits_smem(bytes)) {
    FL_OPT_IN_SMEM(in_smem, bytes);
    in_smem<<<n, kRowThreads, bytes, st>>>(z, coef, y, m, step);
  } else {
    in_global<<<n, kRowThreads, 0, st>>>(z, coef, y, m, step);
  }
  FL_CHECK_LAUNCH();
  return nullptr;
}

inline const char* launch_affine_softmax_rows(const float* z, const float* coef, float* y, int n, int m,
                                              long long* step, cudaStream_t st) {
  return launch_rows(affine_softmax_rows_kernel<true>, affine_softmax_rows_kernel<false>, z, coef, y, n, m, step,
                     st);
}

// ---------------------------------------------------------------- online row softmax (fused)
// Online softmax merge (Milakov & Gimelshein 2018): (m, l) ⊕ (m', l') = (M, l·e^{m−M} + l'·e^{m'−M}).
__device__ __forceinline__ void softmax_merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = l * expf(m - mx) + l2 * expf(m2 - mx);
  m = mx;
}

// Barriers for the row functions: the whole block, or named barrier 1 of N threads (the
// wgmma kernel's consumer warpgroups).
struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};
template <int N>
struct NamedSync {
  __device__ void operator()() const { asm volatile("bar.sync 1, %0;\n" ::"n"(N) : "memory"); }
};

// One row by THREADS threads numbered tid: V = a∘Z' + c (coef == nullptr: V = Z') read once
// (into `row` in shared memory when ROW_IN_SMEM) while each thread keeps online (max, Σexp)
// partials over its columns; the partials merge across the threads in a fixed order (red_m,
// red_l: THREADS / 32 words each); then Y = exp(V − M)/L is written once. Z' and the
// coefficients are read through L2 (__ldcg): in a one-launch forward other SMs wrote them
// in the same kernel. sync(): a barrier of the THREADS threads.
template <bool ROW_IN_SMEM, int THREADS, class Sync>
__device__ __forceinline__ void online_softmax_row(const float* zr, const float* coef, float* yr, int m, float* row,
                                                   float* red_m, float* red_l, int tid, Sync sync) {
  float mx = -INFINITY, l = 0.f;
  const bool vec = ROW_IN_SMEM && (m & 3) == 0;  // 16-byte loads (rows then start 16-byte aligned)
  if (vec) {
    for (int j = 4 * tid; j < m; j += 4 * THREADS) {
      float4 v = __ldcg(reinterpret_cast<const float4*>(zr + j));
      if (coef) {
        v.x = __ldcg(coef + j) * v.x + __ldcg(coef + m + j);
        v.y = __ldcg(coef + j + 1) * v.y + __ldcg(coef + m + j + 1);
        v.z = __ldcg(coef + j + 2) * v.z + __ldcg(coef + m + j + 2);
        v.w = __ldcg(coef + j + 3) * v.w + __ldcg(coef + m + j + 3);
      }
      *reinterpret_cast<float4*>(row + j) = v;
      softmax_merge(mx, l, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)), 0.f);
      l += expf(v.x - mx) + expf(v.y - mx) + expf(v.z - mx) + expf(v.w - mx);
    }
  } else {
    for (int j = tid; j < m; j += THREADS) {
      const float v = coef ? __ldcg(coef + j) * __ldcg(zr + j) + __ldcg(coef + m + j) : __ldcg(zr + j);
      if (ROW_IN_SMEM) row[j] = v;
      softmax_merge(mx, l, v, 1.f);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    softmax_merge(mx, l, m2, l2);
  }
  const int lane = tid & 31, wid = tid >> 5;
  if (lane == 0) { red_m[wid] = mx; red_l[wid] = l; }
  sync();
  mx = red_m[0];
  l = red_l[0];
  for (int q = 1; q < THREADS / 32; ++q) softmax_merge(mx, l, red_m[q], red_l[q]);
  const float inv = 1.f / l;
  if (vec) {
    for (int j = 4 * tid; j < m; j += 4 * THREADS) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      *reinterpret_cast<float4*>(yr + j) =
          make_float4(expf(v.x - mx) * inv, expf(v.y - mx) * inv, expf(v.z - mx) * inv, expf(v.w - mx) * inv);
    }
  } else {
    for (int j = tid; j < m; j += THREADS) {
      const float v = ROW_IN_SMEM ? row[j] : (coef ? __ldcg(coef + j) * __ldcg(zr + j) + __ldcg(coef + m + j)
                                                   : __ldcg(zr + j));
      yr[j] = expf(v - mx) * inv;
    }
  }
  sync();  // row, red_m and red_l are reused by the next row
}

// One block of 512 threads a row (launch_rows).
template <bool ROW_IN_SMEM>
__global__ void online_softmax_rows_kernel(const float* z, const float* __restrict__ coef, float* y, int m,
                                           long long* step) {
  extern __shared__ float row[];
  __shared__ float red_m[16], red_l[16];
  count_train_step(step);
  online_softmax_row<ROW_IN_SMEM, 512>(z + (size_t)blockIdx.x * m, coef, y + (size_t)blockIdx.x * m, m, row, red_m,
                                       red_l, threadIdx.x, BlockSync());
}

// ---------------------------------------------------------------- a one-launch forward's row pass
// Phase 2 of the fused forward in the persistent wgmma GEMM's launch (gemm_wgmma.cuh), after
// its grid-wide barrier (every tile's Z' stored, every column's a, c merged): the 256 consumer
// threads of each CTA take rows blockIdx.x, blockIdx.x + gridDim.x, …; `smem` (floats) is the
// drained load ring. Rows::run is called by those 256 threads only.
struct NoRows {
  static constexpr bool kActive = false;
  __device__ static void run(const Problem&, float*, size_t, int) {}
};

struct SoftmaxRows {  // 84: Y = softmax(a∘Z' + c) by rows (online_softmax_row)
  static constexpr bool kActive = true;
  __device__ static void run(const Problem& p, float* smem, size_t smem_floats, int tid) {
    float *red_m = smem, *red_l = smem + 8, *row = smem + 16;
    const bool in_smem = (size_t)p.m + 16 <= smem_floats;
    for (int r = blockIdx.x; r < p.n; r += gridDim.x) {
      const float* zr = p.z + (size_t)r * p.m;
      float* yr = p.y + (size_t)r * p.m;
      if (in_smem)
        online_softmax_row<true, 256>(zr, p.coef, yr, p.m, row, red_m, red_l, tid, NamedSync<256>());
      else
        online_softmax_row<false, 256>(zr, p.coef, yr, p.m, row, red_m, red_l, tid, NamedSync<256>());
    }
  }
};

struct AffineRows {  // 33/39: Y = a∘Z' + c by rows
  static constexpr bool kActive = true;
  __device__ static void run(const Problem& p, float*, size_t, int tid) {
    const float* a = p.coef;
    const float* c = p.coef + p.m;
    for (int r = blockIdx.x; r < p.n; r += gridDim.x) {
      const float* zr = p.z + (size_t)r * p.m;
      float* yr = p.y + (size_t)r * p.m;
      if ((p.m & 3) == 0) {  // rows start 16-byte aligned
        for (int j = 4 * tid; j < p.m; j += 4 * 256) {
          float4 v = __ldcg(reinterpret_cast<const float4*>(zr + j));
          v.x = __ldcg(a + j) * v.x + __ldcg(c + j);
          v.y = __ldcg(a + j + 1) * v.y + __ldcg(c + j + 1);
          v.z = __ldcg(a + j + 2) * v.z + __ldcg(c + j + 2);
          v.w = __ldcg(a + j + 3) * v.w + __ldcg(c + j + 3);
          *reinterpret_cast<float4*>(yr + j) = v;
        }
      } else {
        for (int j = tid; j < p.m; j += 256) yr[j] = __ldcg(a + j) * __ldcg(zr + j) + __ldcg(c + j);
      }
    }
  }
};

inline const char* launch_online_softmax_rows(const float* z, const float* coef, float* y, int n, int m,
                                              long long* step, cudaStream_t st) {
  static_assert(kRowThreads == 512, "online_softmax_rows_kernel is instantiated for 512 threads");
  return launch_rows(online_softmax_rows_kernel<true>, online_softmax_rows_kernel<false>, z, coef, y, n, m, step,
                     st);
}

}  // namespace fl
