// GEMM epilogues: what happens to one BM×BN accumulator tile once a mainloop has finished it.
// Every mainloop (gemm_simt.cuh, gemm_mma.cuh, gemm_wgmma.cuh) stages its accumulators in a
// shared-memory tile C (row stride BN + 1) and hands it to the epilogue it was instantiated
// with, so each epilogue exists once for every hardware path (CUTLASS 3's collective
// epilogue, and its visitor trees' column reductions, at a fraction of the size):
//   BiasStore          out = C + bias                                   (naive, fold)
//   AffineStore        out = a∘C + c, a and c of the tile's columns     (sums, fused: eval)
//                      from the running buffers, γ, β, s and the bias
//   ColumnStats        out = C (Z' = XWᵀ) and the tile's column partials (sums)
//                      (n_t, mean_t, M2_t): mean first, then Σ(z − mean_t)²
//   ColumnStatsMerge   ColumnStats, then the last tile of each column   (fused)
//                      block merges every row tile's partials in order (Chan) into a, c
//                      and the running buffers (tile counter + fence, no float atomics)
// Interface: Epi::apply<BM, BN, THREADS>(p, C, scratch, out, m0, n0, tid), called by THREADS
// threads numbered tid = 0 … THREADS − 1 (a mainloop may keep other warps out, as the wgmma
// producer warpgroup is); they synchronise on named barrier 1 only. scratch holds
// scratch_floats<THREADS, BN>() floats. Specification: fusedlib/algebra.py (tile_partials, chan_merge).
#pragma once
#include "common.cuh"

namespace fl {

// Barrier of the THREADS epilogue threads (named barrier 1; barrier 0 is __syncthreads).
template <int THREADS>
__device__ __forceinline__ void epilogue_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory");
}

// Scratch words an epilogue may use: a row group's partial sums (THREADS), or a tile's
// coefficients a, c (2·BN); then 32 words of flags.
template <int THREADS, int BN>
__host__ __device__ constexpr int scratch_floats() {
  return (THREADS > 2 * BN ? THREADS : 2 * BN) + 32;
}

enum class Store { kPlain, kBias, kAffine };

// Store the valid part of the tile, rows m0…, columns n0…, coalesced (consecutive threads
// write consecutive columns): as is, plus the bias, or a∘C + c with the tile's coefficients
// a = ac[0:BN], c = ac[BN:2BN].
template <int BM, int BN, int THREADS, Store S>
__device__ __forceinline__ void store_tile(const Problem& p, const float* C, float* out, int m0, int n0, int tid,
                                           const float* ac = nullptr) {
  constexpr int LDC = BN + 1;
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
  for (int idx = tid; idx < BM * BN; idx += THREADS) {
    const int r = idx / BN, c = idx % BN, j = n0 + c;
    if (r < rows && c < cols) {
      float v = C[r * LDC + c];
      if (S == Store::kBias) v += p.bias[j];
      if (S == Store::kAffine) v = ac[c] * v + ac[BN + c];
      out[(size_t)(m0 + r) * p.m + j] = v;
    }
  }
}

struct BiasStore {
  template <int BM, int BN, int THREADS>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    store_tile<BM, BN, THREADS, Store::kBias>(p, C, out, m0, n0, tid);
  }
};

// Eval mode of sums and fused: BatchNorm (running statistics), the scale and the Linear's
// bias applied per column as V = a∘(XWᵀ) + c (eval_affine with fold_bias). Each tile
// computes its columns' a, c into shared memory from the parameters, so nothing is cached
// between calls (a write through .data is seen at once) and no kernel runs before the GEMM.
struct AffineStore {
  template <int BM, int BN, int THREADS>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    for (int c = tid; c < BN && n0 + c < p.m; c += THREADS) {
      const Affine ac = eval_affine(p, n0 + c, true);
      scratch[c] = ac.a;
      scratch[BN + c] = ac.c;
    }
    epilogue_sync<THREADS>();
    store_tile<BM, BN, THREADS, Store::kAffine>(p, C, out, m0, n0, tid, scratch);
  }
};

struct ColumnStats {
  // Z' and the partials (mean_t, M2_t) of row tile t = m0 / BM at p.part[2t][n0 + c],
  // p.part[2t + 1][n0 + c]. R = THREADS / BN row groups each sum rows g, g + R, …; the R
  // sums of a column are added in group order (deterministic).
  template <int BM, int BN, int THREADS>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    constexpr int LDC = BN + 1, R = THREADS / BN;  // threads past R·BN only store
    static_assert(THREADS >= BN, "need a thread per column");
    store_tile<BM, BN, THREADS, Store::kPlain>(p, C, out, m0, n0, tid);
    const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
    const int c = tid % BN, g = tid / BN;
    const bool active = g < R;
    float* red = scratch;  // [R][BN]
    float mean = 0.f;
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {  // 0: Σz → mean_t; 1: Σ(z − mean_t)² → M2_t
      // Four independent sums (rows g + R·(4i + u), u = 0…3), added in a fixed order at the
      // end: four loads in flight instead of one dependent chain through shared memory.
      // (Register arrays are indexed by compile-time constants only: no local memory.)
      float s4[4] = {0.f, 0.f, 0.f, 0.f};
      if (active) {
        int r = g;
        for (; r + 3 * R < rows; r += 4 * R)
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float d = C[(r + u * R) * LDC + c] - mean;
            s4[u] += pass ? d * d : d;
          }
        for (; r < rows; r += R) {  // the last rows (fewer than 4 R) into the first sum
          const float d = C[r * LDC + c] - mean;
          s4[0] += pass ? d * d : d;
        }
      }
      const float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
      if (active) red[g * BN + c] = s;
      epilogue_sync<THREADS>();
      float total = 0.f;
      if (active)
        for (int q = 0; q < R; ++q) total += red[q * BN + c];
      epilogue_sync<THREADS>();  // red is rewritten by the next pass
      if (pass == 0) {
        mean = total / (float)rows;
      } else if (g == 0 && c < cols) {
        const int t = m0 / BM;
        p.part[(size_t)(2 * t) * p.m + n0 + c] = mean;
        p.part[(size_t)(2 * t + 1) * p.m + n0 + c] = total;
      }
    }
  }
};

struct ColumnStatsMerge {
  // ColumnStats, then count this tile on its column block's counter (fence first); the
  // last tile of the column block resets the counter to zero for the next call (the host
  // keeps the counters between calls: fusedlib/kernels/torch_op.cuh), merges all row tiles
  // in order 0, 1, … (Chan) and finalizes the BatchNorm coefficients and running buffers.
  template <int BM, int BN, int THREADS>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    ColumnStats::apply<BM, BN, THREADS>(p, C, scratch, out, m0, n0, tid);
    const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM), cols = min(BN, p.m - n0);
    int* is_last = reinterpret_cast<int*>(scratch + scratch_floats<THREADS, BN>() - 32);
    __threadfence();  // this tile's partials visible device-wide before it is counted
    epilogue_sync<THREADS>();
    if (tid == 0) {
      *is_last = atomicAdd(p.counters + col_block, 1u) == (unsigned)row_tiles - 1;
      if (*is_last) p.counters[col_block] = 0;  // every tile of the block has counted
    }
    epilogue_sync<THREADS>();
    if (!*is_last) return;
    __threadfence();
    for (int cc = tid; cc < cols; cc += THREADS) {
      const Moments mo = merge_column_partials(p, n0 + cc, BM);
      finalize_column(p, n0 + cc, mo.mean, mo.m2 / mo.n, false);
    }
  }
};

// Shared memory an epilogue needs beside nothing else: the C tile and the scratch words.
template <int BM, int BN, int THREADS>
constexpr size_t epilogue_smem_bytes() {
  return ((size_t)BM * (BN + 1) + scratch_floats<THREADS, BN>()) * sizeof(float);
}

}  // namespace fl
