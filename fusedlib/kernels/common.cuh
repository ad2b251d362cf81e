// fusedlib shared device helpers: the problem descriptor, block reductions, Chan's merge
// and the BatchNorm coefficients. Plain CUDA C++ (no torch headers), so that every stage
// file compiles on its own with nvcc for any GPU from sm_75 on. Algebra: fusedlib/algebra.py
// and docs/design.md §3. The kernel layers (docs/design.md §8):
//   gemm_simt.cuh, gemm_mma.cuh, gemm_wgmma.cuh   one GEMM mainloop per hardware path
//   epilogue.cuh                                   what happens to an accumulator tile
//   gemm.cuh                                       the engine: path × epilogue, one call
//   passes.cuh                                     column statistics, affine, row softmax
//   01_naive.cu … 04_fused.cu                      the stages: which epilogue, which passes
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <stdint.h>

#include <map>
#include <mutex>
#include <utility>

namespace fl {

enum Precision { FP32 = 0, TF32 = 1, TF32X3 = 2 };
// The element type of X and W (Problem::operand): fp32 words, or bf16 / fp16 (docs/design.md §15),
// which only the wgmma path reads (products exact, fp32 accumulation, as tf32 reads fp32 words).
enum Operand { OPERAND_FP32 = 0, OPERAND_BF16 = 1, OPERAND_FP16 = 2 };
// GEMM mainloops (fusedlib/engine.py PATHS): FFMA on any GPU; mma.sync TF32 (sm_80 on);
// TMA + wgmma (sm_90a). The host picks one per call (engine.select_path).
enum GemmPath { PATH_SIMT = 0, PATH_MMA = 1, PATH_WGMMA = 2 };

// 16-bit elements by Operand (a bf16/fp16 module's Y, dY and dZ'; docs/design.md §15): loaded
// widened to float32 (exact), stored rounded to nearest even (cuda_bf16.h / cuda_fp16.h: every
// GPU from sm_75 on). Indices count elements of that type from base; store4 writes elements
// 4·q4 … 4·q4 + 3 (16 bytes of float32, 8 of a 16-bit type: base and q4 aligned to them).
template <int OP> struct Element { using T = float; };
template <> struct Element<OPERAND_BF16> { using T = __nv_bfloat16; };
template <> struct Element<OPERAND_FP16> { using T = __half; };
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
template <int OP> __device__ __forceinline__ float load(const float* base, size_t q) {
  return widen(reinterpret_cast<const typename Element<OP>::T*>(base)[q]);
}
template <int OP> __device__ __forceinline__ typename Element<OP>::T narrow(float v) {
  if constexpr (OP == OPERAND_BF16) return __float2bfloat16_rn(v);
  else if constexpr (OP == OPERAND_FP16) return __float2half_rn(v);
  else return v;
}
// Elements 4·q4 … 4·q4 + 3 widened (one 16-byte load of float32, one 8-byte load of a 16-bit type).
template <int OP> __device__ __forceinline__ float4 load4(const float* base, size_t q4) {
  if constexpr (OP == OPERAND_FP32) {
    return reinterpret_cast<const float4*>(base)[q4];
  } else {
    const uint2 u = reinterpret_cast<const uint2*>(base)[q4];
    const auto* e = reinterpret_cast<const typename Element<OP>::T*>(&u);
    return make_float4(widen(e[0]), widen(e[1]), widen(e[2]), widen(e[3]));
  }
}
template <int OP> __device__ __forceinline__ void store(float* base, size_t q, float v) {
  reinterpret_cast<typename Element<OP>::T*>(base)[q] = narrow<OP>(v);
}
// The same with the type known at run time (type: an Operand): a module's vectors in their dtype.
__device__ __forceinline__ float load_as(const void* base, int type, size_t q) {
  const float* b = static_cast<const float*>(base);
  return type == OPERAND_BF16 ? load<OPERAND_BF16>(b, q) : type == OPERAND_FP16 ? load<OPERAND_FP16>(b, q) : b[q];
}
__device__ __forceinline__ void store_as(void* base, int type, size_t q, float v) {
  float* b = static_cast<float*>(base);
  if (type == OPERAND_BF16) store<OPERAND_BF16>(b, q, v);
  else if (type == OPERAND_FP16) store<OPERAND_FP16>(b, q, v);
  else b[q] = v;
}
// A module's vector (the Linear's bias, the scale, γ, β, running_mean, running_var) where it lies:
// element i at i·stride, in type (an Operand): float32, or a bf16/fp16 module's own dtype, read
// widened (exact) and written rounded once, so the kernels need no float32 copy of it.
struct Vec {
  const void* ptr;
  int stride;  // elements (the operator checks that it fits); 1 where type is float32
  int type;
};
// Element i of v as a kernel for operand type OP reads and writes it. The operator reads a vector in
// a 16-bit dtype only where that is x's (torch_op.cuh), so with float32 operands every vector is
// float32 and with OP's 16-bit ones each is float32 or OP's type: a GEMM kernel passes its OP, and
// its inlined reads (the bias in the epilogue, the merge's coefficients) keep only those branches
// and their registers. kAnyOperand (the passes around the GEMM) tells each type at run time.
constexpr int kAnyOperand = -1;
template <int OP = kAnyOperand> __device__ __forceinline__ float vec_at(const Vec& v, long long i) {
  const float* f = static_cast<const float*>(v.ptr);  // (a float32 vector is contiguous: vec_f32)
  if constexpr (OP == kAnyOperand) return load_as(v.ptr, v.type, (size_t)i * v.stride);
  else if constexpr (OP == OPERAND_FP32) return f[i];
  else return v.type == OP ? load<OP>(f, (size_t)i * v.stride) : f[i];
}
template <int OP = kAnyOperand> __device__ __forceinline__ void vec_set(const Vec& v, long long i, float x) {
  float* f = static_cast<float*>(const_cast<void*>(v.ptr));
  if constexpr (OP == kAnyOperand) store_as(f, v.type, (size_t)i * v.stride, x);
  else if constexpr (OP == OPERAND_FP32) f[i] = x;
  else if (v.type == OP) store<OP>(f, (size_t)i * v.stride, x);
  else f[i] = x;
}
inline Vec vec_f32(const float* v) { return Vec{v, 1, OPERAND_FP32}; }
template <int OP> __device__ __forceinline__ void store4(float* base, size_t q4, float4 v) {
  if constexpr (OP == OPERAND_FP32) {
    reinterpret_cast<float4*>(base)[q4] = v;
  } else {
    uint2 u;
    auto* e = reinterpret_cast<typename Element<OP>::T*>(&u);
    e[0] = narrow<OP>(v.x), e[1] = narrow<OP>(v.y), e[2] = narrow<OP>(v.z), e[3] = narrow<OP>(v.w);
    reinterpret_cast<uint2*>(base)[q4] = u;
  }
}

// Elements 8·q8 … 8·q8 + 7 widened into v (two 16-byte loads of float32, one of a 16-bit type), and
// v rounded into them (likewise): base and q8 aligned to those bytes.
template <int OP> __device__ __forceinline__ void load8(const float* base, size_t q8, float (&v)[8]) {
  if constexpr (OP == OPERAND_FP32) {
    const float4 lo = reinterpret_cast<const float4*>(base)[2 * q8], hi = reinterpret_cast<const float4*>(base)[2 * q8 + 1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
    const uint4 u = reinterpret_cast<const uint4*>(base)[q8];
    const auto* e = reinterpret_cast<const typename Element<OP>::T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = widen(e[i]);
  }
}
template <int OP> __device__ __forceinline__ void store8(float* base, size_t q8, const float (&v)[8]) {
  if constexpr (OP == OPERAND_FP32) {
    reinterpret_cast<float4*>(base)[2 * q8] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(base)[2 * q8 + 1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 u;
    auto* e = reinterpret_cast<typename Element<OP>::T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = narrow<OP>(v[i]);
    reinterpret_cast<uint4*>(base)[q8] = u;
  }
}

// Everything a stage needs; pointers are device pointers to contiguous float32 tensors (the module's
// vectors: Vec, in their own dtype and stride).
struct Problem {
  const float* x;          // (N, K) input (with operand ≠ OPERAND_FP32: the address of 16-bit elements)
  const float* w;          // (M, K) nn.Linear weight (likewise)
  Vec bias;                // (M)    nn.Linear bias
  Vec scale;               // (1) for problem 84, (M) for 33/39
  Vec gamma;               // (M)    bn.weight
  Vec beta;                // (M)    bn.bias
  Vec running_mean;        // (M)    bn.running_mean, updated in train mode (in its dtype)
  Vec running_var;         // (M)    bn.running_var, updated in train mode (in its dtype)
  float* y;                // (N, M) output
  float* y16;              // (N, M) or null: Y in operand's 16-bit dtype, written by the stage's last pass
                           //        (then y holds the float32 values that pass reads; y_out), or by
                           //        the GEMM's epilogue (eval mode, 33/39, sums and fused: z = y16)
  float* z;                // (N, M) Z = XWᵀ + b or Z' = XWᵀ, in Y's memory: the passes after the
                           //        GEMM read and write it in place, the last one leaves Y there
  int z_type;              // Operand of the elements at z: OPERAND_FP32, or (sums, fused: a 16-bit module
                           //        in train mode, docs/design.md §15) the operand's 16-bit type, as eager
                           //        PyTorch's Linear rounds its output; the statistics come from the
                           //        float32 accumulators before that rounding. Eval mode, 33/39: z is
                           //        Y's memory, and a 16-bit type there is Y's dtype
  float* part;             // (T, 2, M) per-row-tile partials: mean_t, M2_t (naive: row max, Σexp)
  float* coef;             // (4, M) a, c, then batch mean and variance scratch
  unsigned int* counters;  // (ceil(M / 32)) column-tile counters of ColumnStatsMerge: zero
                           //        before the GEMM, left zero by it (each last tile resets its own)
  long long* num_batches_tracked;  // bn.num_batches_tracked (int64 scalar), +1 per train step
  float* splitk;           // (S, tiles, BM·BN) split-K partial tiles (splits > 1), or null
  unsigned int* splitk_counters;  // (tiles) split-K tile counters: zero before the GEMM, left zero
  unsigned int* tile_counter;     // (1) the persistent wgmma GEMM's next unit: zero before, left zero
  int splits;              // split-K splits S of the SIMT or wgmma GEMM (1: none; SplitK)
  float* z0;               // (M) train mode at fp32 and 3xTF32: the first-row shift (below), or null
  const float* x0;         // (K) the shift's row x₀, which the GEMM subtracts from X's rows (read with p.z0
                           //        only): X's own row 0 (p.x), or with x0_external another process's
  int x0_external;         // 1: x₀ is not one of X's rows (data parallelism, ranks ≠ 0: rank 0's first row,
                           //        docs/design.md §14): every row is shifted, row 0 too, and no GEMM row is
                           //        z₀ (p.z0 is not written: D's row 0 is that row's own; shift_keeps_row0)
  float* parts;            // 3xTF32 on wgmma: (2, M, K) W's parts [Wb; Ws] with many row tiles (gemm_wgmma.cuh
                           //        wg_w_pass), or (2, N, K) X's [Xb; Xs] for the swapped GEMM (wg_swap), made
                           //        by a pass at this call; or null
  int n, k, m;             // batch N, in_features K, out_features M, each at most kMaxDim; their products
                           //        (N·M, N·K, M·K) may pass 2³¹: offsets along them are 64-bit
  int kind;                // 84 or 33 (33 and 39)
  int training;            // 1: batch statistics and running-buffer update
  int precision;           // Precision (16-bit operands: TF32, the products being exact either way)
  int operand;             // Operand: X's and W's element type
  int scale_len;           // 1 or M
  int path;                // GemmPath of the GEMM
  float eps;               // BatchNorm eps
  float momentum;          // exponential-average factor (when momentum_none is 0)
  int momentum_none;       // 1: bn.momentum is None, cumulative average 1/num_batches_tracked
  // Data parallelism (docs/design.md §14; train mode; torch_op.cuh sync_train): a forward in two
  // phases around one collective. Phase 1 runs up to the batch statistics and writes this rank's
  // column moments instead of coefficients; phase 2 merges every rank's and runs the rest.
  int sync_phase;          // 0: one process (the whole forward); 1: up to the moments; 2: from every rank's
  float* moments;          // (4, M) phase 1: this rank's [n; mean; M2; z₀] of the Z the stage holds (z₀: its
                           //        GEMM's row 0 under the first-row shift, where p.z0 points; rank 0's only:
                           //        the other ranks' shift row is external and their z₀ slot is left unwritten),
                           //        the message
  const float* gathered;   // (R, 4, M) phase 2: every rank's moments in rank order (p.z0: rank 0's z₀)
  float* stats;            // (2, M) phase 2: the global batch's mean and biased variance of that Z
  int ranks;               // R
};

#define FL_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    cudaError_t fl_err_ = (expr);                       \
    if (fl_err_ != cudaSuccess) return cudaGetErrorString(fl_err_); \
  } while (0)
#define FL_CHECK_LAUNCH() FL_RETURN_IF_ERROR(cudaGetLastError())

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Sizes. One dimension (N, K or M) stays an int and at most kMaxDim, so that a tile origin plus a
// tile, or a loop index plus a block's stride, never leaves int; products of two dimensions may
// exceed 2³¹ (batch 65 537 × out_features 32 768 is 2³¹ + 2¹⁵ outputs), so every offset that
// multiplies a row index by a leading dimension is 64-bit: (size_t)row · ld, or a row's pointer
// computed once and 32-bit offsets inside the row or tile.
constexpr int kMaxDim = INT32_MAX - 65535;  // 2³¹ − 2¹⁶

// Grids of row tiles (a block a tile, row tiles along y, column tiles along x): grid.y is at
// most 65535, so more row tiles (N > 65535 · 128 rows at the GEMMs' 128-row tiles, N > 2 097 120
// at the backward's 32-row dZ' tiles) take several launches, of at most kMaxGridY row tiles each
// and in row order; a kernel gets its launch's first row tile as tile0 (0 for the one launch of
// every smaller grid) and runs row tile tile0 + blockIdx.y. (tile0 is a uniform kernel argument:
// the mainloops compile to the registers and schedule they had with blockIdx.y alone.)
constexpr int kMaxGridY = 65535;

// Opt `kernel` in to `bytes` of dynamic shared memory on the current device. The attribute
// is set once per kernel and device (to the largest size asked for so far): a
// cudaFuncSetAttribute call costs ≈ 1.5 µs of host time, as much as a third of a launch.
inline cudaError_t opt_in_smem(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> set;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const std::lock_guard<std::mutex> lock(mu);
  size_t& have = set[{kernel, dev}];
  if (have >= bytes) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (err == cudaSuccess) have = bytes;
  return err;
}
#define FL_OPT_IN_SMEM(kernel, bytes) FL_RETURN_IF_ERROR(opt_in_smem(reinterpret_cast<const void*>(kernel), (bytes)))

// Dynamic shared memory a block may opt in to on the current device (bytes): 227 KB on
// sm_90, 163 KB on sm_80, 99 KB on sm_86/89/120, 64 KB on sm_75.
inline int max_smem_optin() {
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 48 * 1024;
  if (dev < 64 && cached[dev]) return cached[dev];
  int v = 48 * 1024;
  cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (dev < 64) cached[dev] = v;
  return v;
}

// Streaming multiprocessors of the current device (asked once per device).
inline int sm_count() {
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (dev < 64 && cached[dev]) return cached[dev];
  int v = 1;
  cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
  if (dev < 64) cached[dev] = v;
  return v;
}

// Where a stage's last pass writes Y, in which element type: p.y16 in the operand's 16-bit dtype
// where the host gave one, else p.y in float32.
struct YOut {
  float* y;
  int type;  // Operand
};
inline YOut y_out(const Problem& p) { return p.y16 ? YOut{p.y16, p.operand} : YOut{p.y, OPERAND_FP32}; }
// What the row pass after the GEMM reads: Z' at p.z, in p.z_type.
struct ZIn {
  const float* z;
  int type;  // Operand
};
inline ZIn z_in(const Problem& p) { return ZIn{p.z, p.z_type}; }

template <int OP = kAnyOperand> __device__ __forceinline__ float scale_at(const Problem& p, int j) {
  return p.scale_len == 1 ? vec_at<OP>(p.scale, 0) : vec_at<OP>(p.scale, j);
}

// Round to TF32 (10 explicit mantissa bits), nearest with ties away from zero, as
// algebra.round_tf32: cvt.rna on sm_80 and later, the same bit arithmetic elsewhere.
__device__ __forceinline__ uint32_t to_tf32(float f) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
#else
  r = isfinite(f) ? (__float_as_uint(f) + 0x1000u) & ~0x1FFFu : __float_as_uint(f);
#endif
  return r;
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

// The merge's fixed order (deterministic, the same in every stage and path; algebra.chan_merge):
// the T row tiles of a column cut into kMergeQuarters contiguous quarters, each quarter into
// kMergeChains contiguous chains (chain g of a quarter of Q tiles from lo: tiles
// [lo + ⌊gQ/G⌋, lo + ⌊(g+1)Q/G⌋)); each chain cut into runs of kMergeRun tiles from its start,
// each run merged in tile order and a chain's runs in order (blocked, as BlockedMerge: a chain
// of thousands of tiles otherwise adds each tile's small M2 to a large one thousands of times,
// which biases the variance at tens of millions of rows), a quarter's chains in chain order, then the
// quarters in order. Four threads can merge a column's quarters side by side
// (the persistent GEMM's merge units, epilogue.cuh merge_slice) and one thread all four in
// turn (merge_column_partials), with the same bits.
constexpr int kMergeQuarters = 4, kMergeChains = 8, kMergeRun = 64;

// a then b, where either may be empty (n = 0: an empty chain or quarter).
__device__ __forceinline__ Moments merge_in_order(Moments a, Moments b) {
  return a.n == 0.f ? b : b.n == 0.f ? a : chan_merge(a, b);
}

// Quarter q of column j's row-tile partials, merged. Its G chains advance side by side: a
// round issues the loads of one tile of each chain (2G floats in flight a thread), then merges
// them into the chains' current runs, which join their chains every kMergeRun rounds (a chain
// of at most kMergeRun tiles, e.g. any batch up to 262 144 rows in 128-row tiles, is one run).
// (8 chains: the persistent tf32 GEMM, compiled to 168 registers a thread, spills at 16.)
// L2-coherent loads (__ldcg): the partials were written by other blocks of this grid.
__device__ Moments merge_quarter(const Problem& p, int j, int tile_rows, int q) {
  constexpr int G = kMergeChains;
  const int T = ceil_div(p.n, tile_rows), lo = T * q / kMergeQuarters;
  const int Q = T * (q + 1) / kMergeQuarters - lo, L = ceil_div(Q, G);
  // The quarter's tile means taken about its first one (ref): each merge step then rounds at the
  // scale of the spread of the means, not of |mean| (a column far from zero over many tiles).
  const float ref = Q > 0 ? __ldcg(p.part + (size_t)(2 * lo) * p.m + j) : 0.f;
  Moments acc[G];  // each chain's runs so far
#pragma unroll
  for (int g = 0; g < G; ++g) acc[g] = {0.f, 0.f, 0.f};
  for (int i0 = 0; i0 < L; i0 += kMergeRun) {
    Moments run[G];  // each chain's run of tiles i0 … i0 + kMergeRun − 1
#pragma unroll
    for (int g = 0; g < G; ++g) run[g] = {0.f, 0.f, 0.f};
    for (int i = i0; i < min(L, i0 + kMergeRun); ++i) {
      // Every chain's loads first, unconditional (a chain past its end loads tile lo, unused), and
      // nothing done with them before all are issued: with a load and its use under one branch,
      // each load waited for the one before (run251c, run252: 34 000 → 14 000 SM clocks at 39).
      float mean[G], m2[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int t = lo + Q * g / G + i, at = t < lo + Q * (g + 1) / G ? t : lo;
        mean[g] = __ldcg(p.part + (size_t)(2 * at) * p.m + j);
        m2[g] = __ldcg(p.part + (size_t)(2 * at + 1) * p.m + j);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int t = lo + Q * g / G + i;
        if (t < lo + Q * (g + 1) / G)
          run[g] = merge_in_order(run[g], {(float)min(tile_rows, p.n - t * tile_rows), mean[g] - ref, m2[g]});
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = merge_in_order(acc[g], run[g]);
  }
  Moments r = acc[0];
#pragma unroll
  for (int g = 1; g < G; ++g) r = merge_in_order(r, acc[g]);
  r.mean += ref;
  return r;
}

// Items 0..T−1 (T ≥ 1) combined in order by blocked summation (Higham, "The accuracy of floating
// point summation", 1993): runs of 64 items, runs of 64 runs, then those in turn. A result passes
// through at most 64 + 64 + ⌈T/4096⌉ roundings instead of T: what a sum or a merge over millions
// of row tiles needs, in registers and in a fixed order (deterministic). add(u, v) takes item u,
// u = 0, 1, …, T − 1 in turn (from wherever the caller keeps them: the backward's partials kernel
// brings them into shared memory a chunk at a time); total holds the result after item T − 1.
template <class V, class Merge>
struct BlockedMerge {
  int T;
  Merge merge;
  V total{}, outer{}, inner{};
  __device__ __forceinline__ void add(int u, const V& v) {
    constexpr int kRun = kMergeRun;
    inner = u % kRun == 0 ? v : merge(inner, v);                                // a run of items
    if ((u + 1) % kRun != 0 && u + 1 != T) return;
    outer = u % (kRun * kRun) < kRun ? inner : merge(outer, inner);             // a run of runs
    if ((u + 1) % (kRun * kRun) != 0 && u + 1 != T) return;
    total = u < kRun * kRun ? outer : merge(total, outer);                      // those in turn
  }
};

// All T row-tile partials of column j, merged in that order by one thread.
__device__ Moments merge_column_partials(const Problem& p, int j, int tile_rows) {
  Moments r = merge_quarter(p, j, tile_rows, 0);
  for (int q = 1; q < kMergeQuarters; ++q) r = merge_in_order(r, merge_quarter(p, j, tile_rows, q));
  return r;
}

// This train step's running-average factor: the momentum, or for momentum=None the
// cumulative 1/num_batches_tracked, counting this step (the step's last kernel adds it:
// count_train_step). Read on the device: no host sync, so a forward can be captured in a
// CUDA graph.
__device__ __forceinline__ float step_momentum(const Problem& p) {
  return p.momentum_none ? 1.f / (float)(*p.num_batches_tracked + 1) : p.momentum;
}

// num_batches_tracked += 1, as nn.BatchNorm1d does in train mode: by one thread of the train
// step's last kernel, after every kernel that reads the counter (step_momentum); nothing in
// eval mode (num_batches_tracked == nullptr).
__device__ __forceinline__ void count_train_step(long long* num_batches_tracked) {
  if (num_batches_tracked && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *num_batches_tracked += 1;
}

// The first-row shift (train mode at fp32 and 3xTF32: p.z0 set; algebra.train_gemm): the GEMM
// runs over [x₀; X[1:] − x₀] (x₀ the batch's first row), so that the Z every later pass sees is
// Z − Z₀ = (X − x₀)Wᵀ = D, whose row 0 is 0 and in which the Linear's bias cancels, instead of
// XWᵀ + b: the same Z − μ, without the cancellation of a GEMM rounded to |x̄|·‖W‖ when X's
// columns sit far from zero, nor that of adding a bias ≫ a column's spread. The epilogue moves
// the GEMM's row 0, x₀Wᵀ, to p.z0; column_shift(p, j) = x₀Wᵀ + b of column j, what the running
// mean adds back (0 without the shift). The mainloops read x₀ from p.x0. Data parallelism
// (docs/design.md §14): on ranks other than 0, x₀ is rank 0's first row, external
// (p.x0_external): the GEMM runs over X − x₀, row 0 shifted as every other, so Z is D of this
// rank's own rows; its z₀ is rank 0's, which comes with rank 0's message.
template <int OP = kAnyOperand> __device__ __forceinline__ float column_shift(const Problem& p, int j) {
  return p.z0 ? p.z0[j] + vec_at<OP>(p.bias, j) : 0.f;
}

// Whether the shift leaves X's row 0 as it is (x₀ itself, whose GEMM row is z₀): in one process
// and on rank 0; not with an external x₀, where every row is shifted and no GEMM row is z₀. The
// mainloops and take_shift_row test it beside their own row-0 test (m0 + r == 0), which they
// keep as it was, and with it the registers of one process (comparing m0 + r with a row index
// held in a register instead cost the mma.sync kernels up to 12 registers a thread on sm_100).
__device__ __forceinline__ bool shift_keeps_row0(const Problem& p) { return !p.x0_external; }

// running ← (1 − m)·running + m·batch for column j, of what BatchNorm saw (its batch mean and
// biased variance over n rows); the variance stored unbiased, ×n/(n−1). A 16-bit module's buffers
// take the float32 values rounded once, as a tensor's .to(dtype) rounds them.
template <int OP = kAnyOperand>
__device__ __forceinline__ void update_running(const Problem& p, int j, float mean, float var, float n) {
  const float mom = step_momentum(p);
  vec_set<OP>(p.running_mean, j, (1.f - mom) * vec_at<OP>(p.running_mean, j) + mom * mean);
  vec_set<OP>(p.running_var, j, (1.f - mom) * vec_at<OP>(p.running_var, j) + mom * (var * (n / (n - 1.f))));
}

// Train mode, column j: coefficients a, c with V = a·Z + c from the batch mean and biased
// variance of the Z the stage holds over n rows (with bias if z_has_bias; D when p.z0 is set),
// then the running buffers.
// 84: a = sγ/√(σ²+ε), c = sβ − aμ.  33: a = γs/√(s²σ²+ε), c = β − aμ (s = 0 gives c = β).
// Running buffers track Z (84) or Z∘s (33).
template <int OP = kAnyOperand>
__device__ __forceinline__ void finalize_column(const Problem& p, int j, float mean, float var, bool z_has_bias, float n) {
  const float s = scale_at<OP>(p, j), g = vec_at<OP>(p.gamma, j), be = vec_at<OP>(p.beta, j);
  float a, c;
  if (p.kind == 84) {
    a = s * g / sqrtf(var + p.eps);
    c = s * be - a * mean;
  } else {
    a = g * s / sqrtf(s * s * var + p.eps);
    c = be - a * mean;
  }
  p.coef[j] = a;
  p.coef[(size_t)p.m + j] = c;
  float tm = mean + (p.z0 ? column_shift<OP>(p, j) : z_has_bias ? 0.f : vec_at<OP>(p.bias, j)), tv = var;
  if (p.kind != 84) { tm = s * tm; tv = s * s * tv; }
  update_running<OP>(p, j, tm, tv, n);
}

// Column j's statistics done, from its moments over this process's rows: the coefficients and the
// running buffers (finalize_column), or in phase 1 of a data-parallel forward this rank's
// moments, the message (p.moments).
template <int OP = kAnyOperand>
__device__ __forceinline__ void column_done(const Problem& p, int j, Moments mo, bool z_has_bias) {
  if (!p.moments) return finalize_column<OP>(p, j, mo.mean, mo.m2 / mo.n, z_has_bias, mo.n);
  p.moments[j] = mo.n;
  p.moments[(size_t)p.m + j] = mo.mean;
  p.moments[2 * (size_t)p.m + j] = mo.m2;
}

// Phase 2 of a data-parallel forward, column j: every rank's moments (p.gathered) merged with
// Chan's formula in rank order (a rank with no rows passed over: merge_in_order), the same
// bits on every rank; the global mean and biased variance to p.stats. Returns them, with N.
__device__ __forceinline__ Moments merge_ranks(const Problem& p, int j) {
  Moments r{0.f, 0.f, 0.f};
  for (int q = 0; q < p.ranks; ++q) {
    const float* g = p.gathered + (size_t)q * 4 * p.m;
    r = merge_in_order(r, {g[j], g[(size_t)p.m + j], g[2 * (size_t)p.m + j]});
  }
  p.stats[j] = r.mean;
  p.stats[(size_t)p.m + j] = r.m2 / r.n;
  return r;
}

// Eval mode, column j: a, c with V = a·(XWᵀ + b) + c from the running buffers.
// 84: a = sγ/√(r_σ²+ε), c = sβ − a·r_μ.  33: a = γs/√(r_σ²+ε), c = β − γ·r_μ/√(r_σ²+ε).
// With fold_bias, c becomes a·b + c, so that V = a·(XWᵀ) + c (the GEMM adds no bias).
struct Affine { float a, c; };
template <int OP = kAnyOperand> __device__ __forceinline__ Affine eval_affine(const Problem& p, int j, bool fold_bias) {
  const float s = scale_at<OP>(p, j), g = vec_at<OP>(p.gamma, j), be = vec_at<OP>(p.beta, j);
  const float inv = 1.f / sqrtf(vec_at<OP>(p.running_var, j) + p.eps), rm = vec_at<OP>(p.running_mean, j);
  float a, c;
  if (p.kind == 84) {
    a = s * g * inv;
    c = s * be - a * rm;
  } else {
    a = g * s * inv;
    c = be - g * rm * inv;
  }
  return {a, fold_bias ? a * vec_at<OP>(p.bias, j) + c : c};
}

}  // namespace fl
