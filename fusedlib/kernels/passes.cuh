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
  float s = 0.f, lost = 0.f;  // Kahan's compensated sum (a thread adds N/8 rows: millions at large N)
  if (j < m) {
    const float mu = VARIANCE ? mean[j] : 0.f;
    for (int i = threadIdx.y; i < n; i += 8) {
      const float d = z[(size_t)i * m + j] - mu;
      const float term = __fsub_rn(VARIANCE ? __fmul_rn(d, d) : d, lost), t = __fadd_rn(s, term);
      lost = __fsub_rn(__fsub_rn(t, s), term);  // (explicit roundings: no contraction into FMAs)
      s = t;
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
// Y = a∘Z + c, elementwise (problems 33/39); a = coef[0:M], c = coef[M:2M]. Y in OUT (common.cuh
// store): float32, or a 16-bit module's dtype; Z in IN: float32, or the 16-bit type the GEMM's
// epilogue stored Z' in (p.z_type; common.cuh ZIn). Every row pass below reads and writes so, and
// may run in place (z and y one buffer: each element, or each row, is read before it is written).
template <int OUT, int IN>
__global__ void affine_kernel(const float* z, const float* __restrict__ coef, float* y, int n, int m,
                              long long* step) {
  count_train_step(step);
  const size_t total = (size_t)n * m;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const float* __restrict__ c = coef + m;  // c = coef[M:2M] (M + j may pass 2³¹ − 1)
  if ((m & 3) == 0) {  // 16-byte accesses (8-byte of a 16-bit Z)
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total / 4; q += stride) {
      const int j = (int)((q * 4) % m);
      float4 v = load4<IN>(z, q);
      v.x = coef[j] * v.x + c[j];
      v.y = coef[j + 1] * v.y + c[j + 1];
      v.z = coef[j + 2] * v.z + c[j + 2];
      v.w = coef[j + 3] * v.w + c[j + 3];
      store4<OUT>(y, q, v);
    }
  } else {
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total; q += stride) {
      const int j = (int)(q % m);
      store<OUT>(y, q, coef[j] * load<IN>(z, q) + c[j]);
    }
  }
}

// The same Y for a 16-bit Z' (the 16-bit kernels' epilogue stored it so) by rows: thread t of block
// (x, y) owns columns j0 … j0 + 7 (j0 = 8·(256·x + t)) and holds their a and c in registers; the
// block walks rows kAffineRows at a time (y·R, …, then + gridDim.y·R), the R rows' 16-byte loads
// issued before any store. Each element is affine_kernel's expression (one FMA), rounded by the same
// store: the same bits. At 39 in bf16 (16384 × 4096) it takes 64.7 µs against affine_kernel's
// 90.2, at 33 8.1 against 14.0 (H200; the copy's bytes take 64.2 and 8.0 at DRAM speed): a
// 16-bit item of affine_kernel is one 8-byte load behind a 64-bit modulo and eight scalar loads
// of a and c. A float32 Z' stays with affine_kernel, ahead there (16.6 against 21.0 µs at 33).
// Needs M % 8 == 0 and z, y 16-byte aligned (launch_affine).
constexpr int kAffineRows = 2;
template <int OUT, int IN>
__global__ void __launch_bounds__(256) affine_rows_kernel(const float* z, const float* __restrict__ coef, float* y,
                                                          int n, int m, long long* step) {
  count_train_step(step);
  const int j0 = 8 * (blockIdx.x * 256 + threadIdx.x);
  if (j0 >= m) return;
  float a[8], c[8];
  load8<OPERAND_FP32>(coef, j0 / 8, a);
  load8<OPERAND_FP32>(coef + m, j0 / 8, c);
  constexpr int R = kAffineRows;
  for (int i0 = blockIdx.y * R; i0 < n; i0 += gridDim.y * R) {
    float v[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (i0 + r < n) load8<IN>(z, ((size_t)(i0 + r) * m + j0) / 8, v[r]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (i0 + r >= n) continue;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[r][e] = a[e] * v[r][e] + c[e];
      store8<OUT>(y, ((size_t)(i0 + r) * m + j0) / 8, v[r]);
    }
  }
}

// The row passes' element types: f(OUT, IN) called with std::integral_constant<int, Operand>s for
// Y's type and Z's: Z in float32 with any Y, or Z in a 16-bit type with Y in it or in float32
// (autocast's: the fp32 scale promotes Y).
template <class F>
inline const char* with_row_types(YOut y, ZIn z, F&& f) {
  using F32 = std::integral_constant<int, OPERAND_FP32>;
  using B16 = std::integral_constant<int, OPERAND_BF16>;
  using H16 = std::integral_constant<int, OPERAND_FP16>;
  if (z.type == OPERAND_FP32)
    return y.type == OPERAND_BF16 ? f(B16{}, F32{}) : y.type == OPERAND_FP16 ? f(H16{}, F32{}) : f(F32{}, F32{});
  if (y.type == OPERAND_FP32) return z.type == OPERAND_BF16 ? f(F32{}, B16{}) : f(F32{}, H16{});
  if (y.type == z.type) return z.type == OPERAND_BF16 ? f(B16{}, B16{}) : f(H16{}, H16{});
  return "a row pass reads Z' in float32 or in Y's 16-bit type";
}

inline const char* launch_affine(ZIn z, const float* coef, YOut y, int n, int m, long long* step, cudaStream_t st) {
  if (z.type != OPERAND_FP32 && m % 8 == 0 && (uintptr_t)z.z % 16 == 0 && (uintptr_t)y.y % 16 == 0 &&
      (uintptr_t)coef % 16 == 0) {  // by rows: M / 2048 column blocks × the rows over about 4 blocks an SM
    const int gx = ceil_div(m, 8 * 256);
    const int gy = std::max(1, std::min(ceil_div(n, kAffineRows), std::min(ceil_div(sm_count() * 4, gx), kMaxGridY)));
    return with_row_types(y, z, [&](auto out, auto in) -> const char* {
      if constexpr (decltype(in)::value != OPERAND_FP32) {
        affine_rows_kernel<decltype(out)::value, decltype(in)::value><<<dim3(gx, gy), 256, 0, st>>>(z.z, coef, y.y, n, m, step);
        FL_CHECK_LAUNCH();
      }
      return nullptr;
    });
  }
  const size_t work = ((size_t)n * m + 3) / 4;
  const int cap = sm_count() * 16;  // 16 blocks of 256 an SM, grid-stride beyond
  const int blocks = (int)(work < (size_t)cap * 256 ? ceil_div((int)work, 256) : cap);
  return with_row_types(y, z, [&](auto out, auto in) -> const char* {
    affine_kernel<decltype(out)::value, decltype(in)::value><<<blocks, 256, 0, st>>>(z.z, coef, y.y, n, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;
  });
}

// Row softmax of V = a∘Z + c (coef == nullptr: V = Z), three passes over the row
// (max, Σexp, normalize) held in shared memory when it fits (ROW_IN_SMEM), one block a row.
template <bool ROW_IN_SMEM, int OUT, int IN>
__global__ void affine_softmax_rows_kernel(const float* z, const float* __restrict__ coef, float* y, int m,
                                           long long* step) {
  extern __shared__ float row[];
  __shared__ float red[32];
  count_train_step(step);
  const size_t y0 = (size_t)blockIdx.x * m;  // the row's first element of Y, and of Z
  const auto zr = [&](int j) { return load<IN>(z, y0 + j); };
  const float* __restrict__ c = coef + m;  // c = coef[M:2M] (M + j may pass 2³¹ − 1); read only with coef
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = coef ? coef[j] * zr(j) + c[j] : zr(j);
    if (ROW_IN_SMEM) row[j] = v;
    mx = fmaxf(mx, v);
  }
  mx = block_reduce<true>(mx, red);
  float l = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr(j) + c[j] : zr(j));
    l += expf(v - mx);
  }
  l = block_reduce<false>(l, red);
  const float inv = 1.f / l;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr(j) + c[j] : zr(j));
    store<OUT>(y, y0 + j, expf(v - mx) * inv);
  }
}

// Rows up to 200 KB (M ≤ 51200) stay in shared memory where the device allows it.
constexpr int kMaxRowSmemBytes = 200 * 1024;
inline bool row_fits_smem(size_t bytes) {
  return bytes <= (size_t)kMaxRowSmemBytes && bytes + 1024 <= (size_t)max_smem_optin();
}

// One block of 512 threads a row; the row in shared memory (in_smem) when it fits, else
// re-read from global memory (in_global). Both row-softmax passes launch through here, with
// the instantiations of y's element type.
using RowKernel = void (*)(const float*, const float*, float*, int, long long*);
inline const char* launch_rows(RowKernel in_smem, RowKernel in_global, const float* z, const float* coef, float* y,
                               int n, int m, long long* step, cudaStream_t st) {
  const size_t bytes = (size_t)m * sizeof(float);
  if (row_fits_smem(bytes)) {
    FL_OPT_IN_SMEM(in_smem, bytes);
    in_smem<<<n, 512, bytes, st>>>(z, coef, y, m, step);
  } else {
    in_global<<<n, 512, 0, st>>>(z, coef, y, m, step);
  }
  FL_CHECK_LAUNCH();
  return nullptr;
}

inline const char* launch_affine_softmax_rows(ZIn z, const float* coef, YOut y, int n, int m, long long* step,
                                              cudaStream_t st) {
  return with_row_types(y, z, [&](auto out, auto in) {
    constexpr int OUT = decltype(out)::value, IN = decltype(in)::value;
    return launch_rows(affine_softmax_rows_kernel<true, OUT, IN>, affine_softmax_rows_kernel<false, OUT, IN>, z.z, coef,
                       y.y, n, m, step, st);
  });
}

// ---------------------------------------------------------------- online row softmax (fused)
// Online softmax merge (Milakov & Gimelshein 2018): (m, l) ⊕ (m', l') = (M, l·e^{m−M} + l'·e^{m'−M}).
__device__ __forceinline__ void softmax_merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = l * expf(m - mx) + l2 * expf(m2 - mx);
  m = mx;
}

// Every thread's (m, l) merged across the block, in a fixed order (lanes by a shuffle
// butterfly, then warps 0, 1, …); every thread gets the row's (M, L). red_m, red_l: 32 shared
// words each.
__device__ __forceinline__ void block_softmax_merge(float& m, float& l, float* red_m, float* red_l) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    softmax_merge(m, l, m2, l2);
  }
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { red_m[wid] = m; red_l[wid] = l; }
  __syncthreads();
  m = red_m[0];
  l = red_l[0];
  for (int w = 1; w < nw; ++w) softmax_merge(m, l, red_m[w], red_l[w]);
}

// One block a row: V = a∘Z' + c (coef == nullptr: V = Z') read once into shared memory
// while each thread keeps online (max, Σexp) partials over its columns; the partials merge
// across the block in a fixed order; then Y = exp(V − M)/L is written once.
template <bool ROW_IN_SMEM, int OUT, int IN>
__global__ void online_softmax_rows_kernel(const float* z, const float* __restrict__ coef, float* y, int m,
                                           long long* step) {
  extern __shared__ float row[];
  __shared__ float red_m[32], red_l[32];
  count_train_step(step);
  const size_t y0 = (size_t)blockIdx.x * m;  // the row's first element of Y and Z (a multiple of 4 with vec)
  const auto zr = [&](int j) { return load<IN>(z, y0 + j); };
  const float* __restrict__ c = coef + m;  // c = coef[M:2M] (M + j may pass 2³¹ − 1); read only with coef
  float mx = -INFINITY, l = 0.f;
  const bool vec = ROW_IN_SMEM && (m & 3) == 0;  // 16-byte loads (rows then start 16-byte aligned)
  if (vec) {
    for (int j = 4 * threadIdx.x; j < m; j += 4 * blockDim.x) {
      float4 v = load4<IN>(z, (y0 + j) / 4);
      if (coef) {
        v.x = coef[j] * v.x + c[j];
        v.y = coef[j + 1] * v.y + c[j + 1];
        v.z = coef[j + 2] * v.z + c[j + 2];
        v.w = coef[j + 3] * v.w + c[j + 3];
      }
      *reinterpret_cast<float4*>(row + j) = v;
      softmax_merge(mx, l, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)), 0.f);
      l += expf(v.x - mx) + expf(v.y - mx) + expf(v.z - mx) + expf(v.w - mx);
    }
  } else {
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
      const float v = coef ? coef[j] * zr(j) + c[j] : zr(j);
      if (ROW_IN_SMEM) row[j] = v;
      softmax_merge(mx, l, v, 1.f);
    }
  }
  block_softmax_merge(mx, l, red_m, red_l);
  const float inv = 1.f / l;
  if (vec) {
    for (int j = 4 * threadIdx.x; j < m; j += 4 * blockDim.x) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      store4<OUT>(y, (y0 + j) / 4,
                  make_float4(expf(v.x - mx) * inv, expf(v.y - mx) * inv, expf(v.z - mx) * inv, expf(v.w - mx) * inv));
    }
    return;
  }
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = ROW_IN_SMEM ? row[j] : (coef ? coef[j] * zr(j) + c[j] : zr(j));
    store<OUT>(y, y0 + j, expf(v - mx) * inv);
  }
}

// The exponential of a row whose Z' is read as IN: expf from a float32 Z'; from a bf16 or fp16 Z'
// (a 16-bit module in train mode) the hardware's approximate one, __expf, at most 2 + 1.17|x| ulps
// of float (under 2e-5 relative for x ≥ −88), where Z's own rounding (unit roundoff 2⁻⁸ in bf16,
// 2⁻¹¹ in fp16) has already moved the argument by that much times |V|. Keyed on Z', not on Y, so
// that a float32 Y (a float32 scale promotes it) is still the 16-bit Y's values unrounded.
// (84's 16-bit row pass in bf16 on an H200: 17.6 µs with it in run249's standalone timing of the
// package, run255, against 18.9 with expf, run251a.)
template <int IN>
__device__ __forceinline__ float row_exp(float x) {
  return IN == OPERAND_FP32 ? expf(x) : __expf(x);
}

// Rows of M ≤ 4·VEC·256 with M % 4 == 0 (84's 8192 among them) stay in registers: 256
// threads a row, each issuing its VEC 16-byte loads of Z' (and of a, c) at once. A thread takes
// the maximum m_t of its values first, then one exponential an element, e = exp(v − m_t), kept in
// place of v, with l_t = Σe; the (m_t, l_t) pairs merge across the block as above into (M, L), and
// Y = e · (exp(m_t − M)/L): one exponential an element where the merge a float4 took 2.5. One
// read and one write of the row, no shared-memory copy. A thread whose values are all −∞ keeps
// e = 0 and l_t = 0. (run249–run251: 84 in bf16, 18.9 against 22.4 µs on an H200.)
constexpr int kRegRowThreads = 256, kMaxRegRowVec = 8;
template <int VEC, int OUT, int IN>
__global__ void __launch_bounds__(kRegRowThreads) online_softmax_rows_regs_kernel(const float* z,
                                                                                 const float* __restrict__ coef,
                                                                                 float* y, int m, long long* step) {
  __shared__ float red_m[kRegRowThreads / 32], red_l[kRegRowThreads / 32];
  count_train_step(step);
  const size_t y4 = (size_t)blockIdx.x * (m / 4);  // the row's first 4-element group of Y and Z
  const float4 *a4 = reinterpret_cast<const float4*>(coef), *c4 = reinterpret_cast<const float4*>(coef + m);
  const int q4 = m / 4;
  float4 v[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const int q = threadIdx.x + i * kRegRowThreads;
    v[i] = q < q4 ? load4<IN>(z, y4 + q) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  }
  float mt = -INFINITY;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const int q = threadIdx.x + i * kRegRowThreads;
    if (q >= q4) continue;
    if (coef) {
      const float4 a = a4[q], c = c4[q];
      v[i] = make_float4(a.x * v[i].x + c.x, a.y * v[i].y + c.y, a.z * v[i].z + c.z, a.w * v[i].w + c.w);
    }
    mt = fmaxf(mt, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
  }
  const float shift = mt == -INFINITY ? 0.f : mt;  // (all −∞: e = exp(−∞) = 0, not exp(−∞ + ∞))
  float mx = mt, l = 0.f;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (threadIdx.x + i * kRegRowThreads >= q4) continue;
    v[i] = make_float4(row_exp<IN>(v[i].x - shift), row_exp<IN>(v[i].y - shift), row_exp<IN>(v[i].z - shift),
                       row_exp<IN>(v[i].w - shift));
    l += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  block_softmax_merge(mx, l, red_m, red_l);
  const float s = row_exp<IN>(mt - mx) / l;  // (m_t = −∞ beside a finite M: 0)
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const int q = threadIdx.x + i * kRegRowThreads;
    if (q < q4) store4<OUT>(y, y4 + q, make_float4(v[i].x * s, v[i].y * s, v[i].z * s, v[i].w * s));
  }
}

// Register rows where they fit (and Z', Y, a, c are 16-byte aligned), else launch_rows.
template <int OUT, int IN>
inline const char* launch_online_softmax_rows_of(const float* z, const float* coef, float* y, int n, int m,
                                                 long long* step, cudaStream_t st) {
  const int vec = ceil_div(m, 4 * kRegRowThreads);
  const bool aligned = m % 4 == 0 && ((uintptr_t)z | (uintptr_t)y | (uintptr_t)coef) % 16 == 0;
  if (aligned && vec <= kMaxRegRowVec) {
    const auto kernel = vec == 1   ? online_softmax_rows_regs_kernel<1, OUT, IN>
                        : vec == 2 ? online_softmax_rows_regs_kernel<2, OUT, IN>
                        : vec <= 4 ? online_softmax_rows_regs_kernel<4, OUT, IN>
                                   : online_softmax_rows_regs_kernel<8, OUT, IN>;
    kernel<<<n, kRegRowThreads, 0, st>>>(z, coef, y, m, step);
    FL_CHECK_LAUNCH();
    return nullptr;
  }
  return launch_rows(online_softmax_rows_kernel<true, OUT, IN>, online_softmax_rows_kernel<false, OUT, IN>, z, coef, y,
                     n, m, step, st);
}

inline const char* launch_online_softmax_rows(ZIn z, const float* coef, YOut y, int n, int m, long long* step,
                                              cudaStream_t st) {
  return with_row_types(y, z, [&](auto out, auto in) {
    return launch_online_softmax_rows_of<decltype(out)::value, decltype(in)::value>(z.z, coef, y.y, n, m, step, st);
  });
}

// ---------------------------------------------------------------- data parallelism (docs/design.md §14)
// Phase 1 of naive and fold: this rank's moments (n, mean, M2 = n·var) from the two column passes.
__global__ void local_moments_kernel(const Problem p, const float* __restrict__ mean, const float* __restrict__ var) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < p.m) column_done(p, j, {(float)p.n, mean[j], (float)p.n * var[j]}, false);
}

inline const char* launch_local_moments(const Problem& p, const float* mean, const float* var, cudaStream_t st) {
  local_moments_kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p, mean, var);
  FL_CHECK_LAUNCH();
  return nullptr;
}

// Phase 2: every rank's moments merged (common.cuh merge_ranks), then the coefficients and the
// running buffers over the global batch (finalize_column; z_has_bias as there), or for naive
// (NAIVE) the batch mean and variance of what its BatchNorm normalises — Z (84), Z∘s (33: s·mean,
// s²·var, from the moments of Z) — into coef[2M:4M], and the running buffers.
template <bool NAIVE>
__global__ void rank_merge_kernel(const Problem p, bool z_has_bias) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.m) return;
  const Moments r = merge_ranks(p, j);
  const float var = r.m2 / r.n;
  if (!NAIVE) return finalize_column(p, j, r.mean, var, z_has_bias, r.n);
  const float s = p.kind == 84 ? 1.f : scale_at(p, j), mean = s * r.mean, v = s * s * var;
  p.coef[2 * (size_t)p.m + j] = mean;
  p.coef[3 * (size_t)p.m + j] = v;
  update_running(p, j, mean + column_shift(p, j) * s, v, r.n);
}

inline const char* launch_rank_merge(const Problem& p, bool naive, bool z_has_bias, cudaStream_t st) {
  const auto kernel = naive ? rank_merge_kernel<true> : rank_merge_kernel<false>;
  kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p, z_has_bias);
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl
