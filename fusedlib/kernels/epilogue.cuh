// GEMM epilogues: what happens to one BM×BN accumulator tile once a mainloop has finished it.
// Each epilogue is defined once for every hardware path (CUTLASS 3's collective epilogue, and
// its visitor trees' column reductions, at a fraction of the size), in two forms of one
// algorithm: the SIMT and mma.sync mainloops stage their accumulators in a shared-memory tile
// C (row stride BN + 1) and call Epi::apply on it; the wgmma mainloop runs it straight from its
// accumulator registers (epilogue_from_fragments, driven by Epi::kStore, kStats, kMerge: no
// C tile, so a persistent CTA keeps its load ring live under the epilogue; epilogue_swapped for
// the swapped 3xTF32 GEMM's tile of Zᵀ):
//   BiasStore          out = C + bias (C with the first-row shift)      (naive, fold)
//   AffineStore        out = a∘C + c, a and c of the tile's columns     (sums, fused: eval)
//                      from the running buffers, γ, β, s and the bias
//   ColumnStats        out = C (Z' = XWᵀ) and the tile's column partials (sums)
//                      (n_t, mean_t, M2_t): mean first, then Σ(z − mean_t)²; Z' in p.z_type
//                      (a 16-bit module's dtype in train mode: rounded once, after the
//                      statistics took the float32 values; on wgmma through TMA, below)
//   ColumnStatsMerge   ColumnStats, then the last tile of each column   (fused)
//                      block merges every row tile's partials in the merge order (Chan) into
//                      a, c and the running buffers (tile counter + fence, no float atomics);
//                      the persistent wgmma GEMM only counts and merges in units after its
//                      tiles (merge_slice)
// Interface (C-tile form): Epi::apply<BM, BN, THREADS>(p, C, scratch, out, m0, n0, tid), called by THREADS
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

// Split-K (grids that would leave most SMs idle, KernelBench's v0 among them; the SIMT and
// wgmma GEMMs): the K steps of a tile cut into S = p.splits contiguous ranges; split s runs
// steps [split_begin(s), split_begin(s + 1)).
__host__ __device__ __forceinline__ int split_begin(int s, int S, int total) { return (int)((long long)total * s / S); }

// A GEMM's split-K plan (host): S splits of `tiles` tiles, each partial tile tile_floats floats
// (the workspace p.splitk, and one counter a tile in p.splitk_counters).
constexpr int kMinSplitSteps = 8, kMaxSplits = 8;  // K steps a split at least; splits at most
struct SplitK {
  int splits, tiles, tile_floats;
  size_t floats() const { return splits > 1 ? (size_t)splits * tiles * tile_floats : 0; }
};

// A split's partial tile, as the GEMM's THREADS accumulating threads hold it (NACC floats a
// thread, thread-major: float i of thread t at [i·THREADS + t]), is stored in p.splitk at unit
// tile·S + s; the tile's counter counts the splits (fence first, as count_tile); the last
// one to count resets the counter, adds the S partial tiles in split order 0, 1, … (the same
// bits whichever split came last) into d and returns true; the others return false. No float
// atomics. The THREADS threads meet on epilogue_sync.
template <int NACC, int THREADS>
__device__ __forceinline__ bool sum_splits(const Problem& p, float (&d)[NACC], int tile, int s, int* last, int tid) {
  const int S = p.splits;
  float* ws = p.splitk + (size_t)tile * S * NACC * THREADS;
#pragma unroll
  for (int i = 0; i < NACC; ++i) __stcg(ws + ((size_t)s * NACC + i) * THREADS + tid, d[i]);
  __threadfence();
  epilogue_sync<THREADS>();
  if (tid == 0) {
    *last = atomicAdd(p.splitk_counters + tile, 1u) == (unsigned)S - 1;
    if (*last) p.splitk_counters[tile] = 0;
  }
  epilogue_sync<THREADS>();
  if (!*last) return false;
  __threadfence();
  const float* part = ws + tid;  // split by split: NACC independent loads in flight at a time
#pragma unroll
  for (int i = 0; i < NACC; ++i) d[i] = __ldcg(part + (size_t)i * THREADS);
  for (int r = 1; r < S; ++r) {
    part += (size_t)NACC * THREADS;
#pragma unroll
    for (int i = 0; i < NACC; ++i) d[i] += __ldcg(part + (size_t)i * THREADS);
  }
  return true;
}

// The first-row shift (common.cuh column_shift): output (row, col) of the GEMM as the epilogue
// sees it — row 0 is x₀Wᵀ, which goes to p.z0, and D's row 0, exactly 0, takes its place (with
// an external x₀, p.x0_external, no row is z₀: every row is D's own, shift_keeps_row0).
// Called by each mainloop on the accumulators it hands over, before any epilogue reads them.
__device__ __forceinline__ float take_shift_row(const Problem& p, float v, int row, int col) {
  if (row != 0 || !p.z0 || !shift_keeps_row0(p)) return v;
  if (col < p.m) p.z0[col] = v;
  return 0.f;
}

enum class Store { kPlain, kBias, kAffine };

// Store the valid part of the tile, rows m0…, columns n0…, coalesced (consecutive threads
// write consecutive columns): as is, plus the bias, or a∘C + c with the tile's coefficients
// a = ac[0:BN], c = ac[BN:2BN]. As is or affine, in p.z_type: a 16-bit type rounds the float32
// value once (train's Z', eval's Y of 33/39: common.cuh Problem::z_type).
template <int BM, int BN, int THREADS, Store S, int OP = kAnyOperand>
__device__ __forceinline__ void store_tile(const Problem& p, const float* C, float* out, int m0, int n0, int tid,
                                           const float* ac = nullptr) {
  constexpr int LDC = BN + 1;
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
  for (int idx = tid; idx < BM * BN; idx += THREADS) {
    const int r = idx / BN, c = idx % BN, j = n0 + c;
    if (r < rows && c < cols) {
      float v = C[r * LDC + c];
      if (S == Store::kBias && !p.z0) v += vec_at<OP>(p.bias, j);  // (Z − Z₀ of the first-row shift has none)
      if (S == Store::kAffine) v = ac[c] * v + ac[BN + c];
      const size_t q = (size_t)(m0 + r) * p.m + j;
      if (S != Store::kBias && p.z_type == OPERAND_BF16) store<OPERAND_BF16>(out, q, v);  // Z' or eval's Y in 16 bits
      else if (S != Store::kBias && p.z_type == OPERAND_FP16) store<OPERAND_FP16>(out, q, v);
      else out[q] = v;
    }
  }
}

struct BiasStore {
  static constexpr Store kStore = Store::kBias;
  static constexpr bool kStats = false, kMerge = false;
  template <int BM, int BN, int THREADS, int OP = kAnyOperand>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    store_tile<BM, BN, THREADS, Store::kBias, OP>(p, C, out, m0, n0, tid);
  }
};

// Eval mode of sums and fused: BatchNorm (running statistics), the scale and the Linear's
// bias applied per column as V = a∘(XWᵀ) + c (eval_affine with fold_bias). Each tile
// computes its columns' a, c into shared memory from the parameters, so nothing is cached
// between calls (a write through .data is seen at once) and no kernel runs before the GEMM.
struct AffineStore {
  static constexpr Store kStore = Store::kAffine;
  static constexpr bool kStats = false, kMerge = false;
  template <int BM, int BN, int THREADS, int OP = kAnyOperand>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    for (int c = tid; c < BN && n0 + c < p.m; c += THREADS) {
      const Affine ac = eval_affine<OP>(p, n0 + c, true);
      scratch[c] = ac.a;
      scratch[BN + c] = ac.c;
    }
    epilogue_sync<THREADS>();
    store_tile<BM, BN, THREADS, Store::kAffine, OP>(p, C, out, m0, n0, tid, scratch);
  }
};

struct ColumnStats {
  static constexpr Store kStore = Store::kPlain;
  static constexpr bool kStats = true, kMerge = false;
  // Z' and the partials (mean_t, M2_t) of row tile t = m0 / BM at p.part[2t][n0 + c],
  // p.part[2t + 1][n0 + c]. R = THREADS / BN row groups each sum rows g, g + R, …; the R
  // sums of a column are added in group order (deterministic).
  template <int BM, int BN, int THREADS, int OP = kAnyOperand>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    store_tile<BM, BN, THREADS, Store::kPlain>(p, C, out, m0, n0, tid);
    partials<BM, BN, THREADS>(p, C, scratch, m0, n0, tid);
  }
  // The partials alone, from the C tile in shared memory.
  template <int BM, int BN, int THREADS>
  __device__ static void partials(const Problem& p, const float* C, float* scratch, int m0, int n0, int tid) {
    constexpr int LDC = BN + 1, R = THREADS / BN;  // threads past R·BN only store
    static_assert(THREADS >= BN, "need a thread per column");
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

// Count a finished tile on its column block's counter, its partials made visible first (the
// fence waits for this thread's outstanding writes: the epilogues write the partials and count
// before they store Z', so that the fence does not wait for the tile's stores too). The last tile
// of the block resets the counter to zero for the next call (the host keeps the counters between
// calls: fusedlib/kernels/torch_op.cuh) and returns true: it then merges (merge_block). flag: one
// shared word. (The persistent GEMM's tiles count through its counting warp instead: gemm_wgmma.cuh.)
template <int BM, int BN, int THREADS>
__device__ __forceinline__ bool count_tile(const Problem& p, int* flag, int n0, int tid) {
  const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM);
  __threadfence();  // this tile's partials visible device-wide before it is counted
  epilogue_sync<THREADS>();
  if (tid == 0) {
    *flag = atomicAdd(p.counters + col_block, 1u) == (unsigned)row_tiles - 1;
    if (*flag) p.counters[col_block] = 0;  // every tile of the block has counted
  }
  epilogue_sync<THREADS>();
  return *flag;
}

// The last tile of a column block (count_tile returned true): all row tiles merged in the merge
// order (Chan; common.cuh) and the BatchNorm coefficients and running buffers finalized.
template <int BM, int BN, int THREADS, int OP = kAnyOperand>
__device__ __forceinline__ void merge_block(const Problem& p, int n0, int tid) {
  __threadfence();
  for (int cc = tid; cc < min(BN, p.m - n0); cc += THREADS) {
    column_done<OP>(p, n0 + cc, merge_column_partials(p, n0 + cc, BM), false);
  }
}

// Columns j0 … j0 + cols − 1 (cols ≤ 64) merged and finalized by 256 threads, four a column:
// thread tid merges quarter tid / 64 of column j0 + tid % 64 (common.cuh merge_quarter), then
// the four quarters are merged in order through shared memory (the bits of
// merge_column_partials, four times the loads in flight). smem: 3 · 256 floats. Named barrier 1
// of the 256 threads (epilogue_sync).
__device__ __forceinline__ void merge_columns(const Problem& p, float* smem, int j0, int cols, int tile_rows,
                                              int tid) {
  static_assert(kMergeQuarters * 64 == 256, "four threads a column, 64 columns");
  const int c = tid % 64, q = tid / 64;
  const Moments mo = c < cols ? merge_quarter(p, j0 + c, tile_rows, q) : Moments{0.f, 0.f, 0.f};
  smem[3 * tid] = mo.n, smem[3 * tid + 1] = mo.mean, smem[3 * tid + 2] = mo.m2;
  epilogue_sync<256>();
  if (q == 0 && c < cols) {
    Moments r = mo;
#pragma unroll
    for (int k = 1; k < kMergeQuarters; ++k) {
      const float* s = smem + 3 * (64 * k + c);
      r = merge_in_order(r, {s[0], s[1], s[2]});
    }
    column_done(p, j0 + c, r, false);
  }
  epilogue_sync<256>();  // smem read before anyone writes it again
}

// A merge unit of the persistent wgmma GEMM (after its tiles): merge_columns on a 64-column
// slice of column block `block`, whose `units` units (a tile each, or with split-K a tile × split)
// count on p.counters[block]. It waits until every one of them has counted (each was handed to a
// running CTA before this unit was: the scheduler hands out the tiles first), then counts itself;
// the last of the block's `slices` units resets the counter.
__device__ __forceinline__ void merge_slice(const Problem& p, float* smem, int block, int j0, int cols,
                                            int units, int slices, int tile_rows, int tid) {
  if (tid == 0) {
    unsigned int v;
    for (;;) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p.counters + block) : "memory");
      if (v >= (unsigned)units) break;
      __nanosleep(200);
    }
  }
  epilogue_sync<256>();
  __threadfence();
  merge_columns(p, smem, j0, cols, tile_rows, tid);
  if (tid == 0 && atomicAdd(p.counters + block, 1u) == (unsigned)(units + slices - 1)) p.counters[block] = 0;
}

struct ColumnStatsMerge {
  static constexpr Store kStore = Store::kPlain;
  static constexpr bool kStats = true, kMerge = true;
  // ColumnStats's partials, the tile counted (count_tile), then Z' stored and, by the last tile
  // of the column block, the merge: the count's fence waits for the partials alone.
  template <int BM, int BN, int THREADS, int OP = kAnyOperand>
  __device__ static void apply(const Problem& p, const float* C, float* scratch, float* out, int m0, int n0,
                               int tid) {
    ColumnStats::partials<BM, BN, THREADS>(p, C, scratch, m0, n0, tid);
    const bool last =
        count_tile<BM, BN, THREADS>(p, reinterpret_cast<int*>(scratch + scratch_floats<THREADS, BN>() - 32), n0, tid);
    store_tile<BM, BN, THREADS, Store::kPlain>(p, C, out, m0, n0, tid);
    if (last) merge_block<BM, BN, THREADS, OP>(p, n0, tid);
  }
};

// ---------------------------------------------------------------- from fragments
// The same epilogues (their kStore, kStats and kMerge) straight from the accumulator registers
// of 8 warps in the mma.sync / wgmma m16n8 layout: warp w holds rows 16w + g and 16w + g + 8
// (g = lane / 4) of a 128-row tile and columns 8j + 2t, 8j + 2t + 1 (t = lane % 4) in
// d[4j … 4j + 3]. No C tile: the stores leave from the registers in 8-byte pairs, and the
// column sums reduce over a column's 8 lanes by a butterfly of shuffles (each step halves what
// a lane keeps), then over the 8 warps in warp order through shared memory: partials
// (mean_t, M2_t) as ColumnStats's, in another fixed order. Rows past N must hold zeros (TMA
// fills them so). Shared memory: fragment_smem_floats<BN>().
template <int BN>
__host__ __device__ constexpr int fragment_smem_floats() {
  return 11 * BN + 32;  // coefficients a, c (2 BN); 8 warps' column sums (8 BN); means (BN); flag
}

// v[0 … V/8 − 1] ← the sums over the 8 lanes of equal lane % 4 of v[i + (V/8)·g] (lane = 4g + t).
template <int H, int MASK, int V>
__device__ __forceinline__ void lane_butterfly_step(float (&v)[V], int lane) {  // v[0 … 2H) → v[0 … H)
  const bool upper = lane & MASK;
#pragma unroll
  for (int i = 0; i < H; ++i) {
    const float lo = v[i], hi = v[i + H];
    v[i] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, MASK);
  }
}
template <int V>
__device__ __forceinline__ void lane_butterfly(float (&v)[V], int lane) {
  static_assert(V % 8 == 0, "three halvings");
  lane_butterfly_step<V / 2, 16>(v, lane);
  lane_butterfly_step<V / 4, 8>(v, lane);
  lane_butterfly_step<V / 8, 4>(v, lane);
}

__device__ __forceinline__ void store_pair(float* dst, float a, float b, int c, int cols, bool pairs) {
  if (pairs && c + 1 < cols) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else {
    if (c < cols) dst[0] = a;
    if (c + 1 < cols) dst[1] = b;
  }
}

// Elements e, e + 1 of a 16-bit Z' (OP's type; e even where pairs: one 4-byte store).
template <int OP>
__device__ __forceinline__ void store_pair16(float* base, size_t e, float a, float b, int c, int cols, bool pairs) {
  auto* z = reinterpret_cast<typename Element<OP>::T*>(base);
  if (pairs && c + 1 < cols) {
    const typename Element<OP>::T two[2] = {narrow<OP>(a), narrow<OP>(b)};
    *reinterpret_cast<uint32_t*>(z + e) = *reinterpret_cast<const uint32_t*>(two);
  } else {
    if (c < cols) z[e] = narrow<OP>(a);
    if (c + 1 < cols) z[e + 1] = narrow<OP>(b);
  }
}

// The TMA epilogue (CUTLASS's, at a fraction of its size; sm_90): a 16-bit Z' tile leaves through
// shared memory. Warpgroup tid / 128 writes its 64 rows, 64 columns (box q) at a time, into one of
// its two 8 KB staging buffers in TMA's 128-byte swizzle (16-byte chunk c of row r at chunk
// c ^ (r % 8), counted from a 1024-byte boundary: the swizzle follows address bits 7–9), and its
// thread 0 stores the box by TMA (zmap: Z' as (N, M) in boxes of 64 × 64) as one bulk group, which
// runs on under the next tile's mainloop; a buffer is rewritten once the group issued from it two
// boxes before has read it. The registers' stores of the same values cost the GEMM 4–13 % at the
// presets (results/h200/NOTES.md, run231–run232). kZStaging bytes of shared memory (two warpgroups,
// two buffers each, and the alignment).
constexpr int kZStaging = 4 * 8192 + 1024;
template <int OP, int BN>
__device__ __forceinline__ void store_z_tma(const Problem& p, const float (&d)[BN / 2], void* staging, const void* zmap,
                                            int m0, int n0, int tid) {
  static_assert(OP != OPERAND_FP32 && BN % 64 == 0, "16-bit boxes of 64 columns");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int wg = tid / 128, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, rl = 16 * (warp % 4) + g;
  const int r0 = m0 + 64 * wg;
  uint8_t* mine = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(staging) + 1023) & ~uintptr_t(1023)) +
                  wg * 2 * 8192;
  const auto bits = [](float a, float b) {
    const typename Element<OP>::T two[2] = {narrow<OP>(a), narrow<OP>(b)};
    return *reinterpret_cast<const uint32_t*>(two);
  };
#pragma unroll
  for (int q = 0; q < BN / 64; ++q) {
    const uint32_t box = (uint32_t)__cvta_generic_to_shared(mine + (q % 2) * 8192);
    if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");  // named barriers 3, 4: one warpgroup
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {  // columns 8jj + 2t of the box: chunk jj of rows rl and rl + 8
      const int j = 8 * q + jj;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(box + rl * 128 + (((jj ^ rl) & 7) << 4) + 4 * t),
                   "r"(bits(d[4 * j], d[4 * j + 1])) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(box + (rl + 8) * 128 + (((jj ^ (rl + 8)) & 7) << 4) + 4 * t),
                   "r"(bits(d[4 * j + 2], d[4 * j + 3])) : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, before TMA reads them
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
    if (tid % 128 == 0) {
      if (n0 + 64 * q < p.m && r0 < p.n)
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                     ::"l"((uint64_t)zmap), "r"(box), "r"(n0 + 64 * q), "r"(r0) : "memory");
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    }
  }
#endif
}
// Before the staging area's next writer (the next tile's statistics, a merge): every bulk store
// issued from it has read it. THREADS: the epilogue's threads, whose thread 0 of each 128 issued them.
template <int THREADS>
__device__ __forceinline__ void z_staging_drained(int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
  epilogue_sync<THREADS>();
}

// Eval's coefficients of column n0 + tid, for a 16-bit Y by TMA (take_coef's values, column by
// thread): a mainloop takes them before its first product, where the accumulators are not yet live
// (beside them, eval_affine's division and square root would spill). Elsewhere unused.
template <class Epi, int OP, int BN>
__device__ __forceinline__ Affine early_coef(const Problem& p, int n0, int tid, bool tma) {
  if constexpr (OP != OPERAND_FP32 && Epi::kStore == Store::kAffine)
    if (tma && tid < BN && n0 + tid < p.m) return eval_affine<OP>(p, n0 + tid, true);
  return {1.f, 0.f};
}

// OP: the GEMM's operand type; a 16-bit OP stores a 16-bit Z' or eval's Y (p.z_type) from the registers, or
// through TMA (store_z_tma) where the mainloop gives Z's map (zmap) and kZStaging bytes at smem; eval's
// Y by TMA then takes column n0 + tid's coefficients as `early` (early_coef, before the mainloop).
// DEFER (the persistent GEMM): a merging epilogue neither counts nor merges; the GEMM's counting warp
// counts the tile once its consumers are done with it, and its merge units merge (gemm_wgmma.cuh);
// but where the batch is one row tile (N ≤ 128: KernelBench v0), the tile finalizes its columns
// from its own moments.
template <int BN, class Epi, bool DEFER = false, int OP = OPERAND_FP32>
__device__ __forceinline__ void epilogue_from_fragments(const Problem& p, float (&d)[BN / 2], float* smem,
                                                        float* out, int m0, int n0, int tid,
                                                        const void* zmap = nullptr, Affine early = {1.f, 0.f}) {
  constexpr int THREADS = 256, BM = 128, NV = BN / 4, V = (NV + 7) / 8 * 8;
  constexpr int CH = NV % 32 == 0 ? 32 : V;  // the statistics' values a thread sums at a time
  float* coef = smem;           // [2][BN]
  float* red = smem + 2 * BN;   // [8][BN]
  float* mean = red + 8 * BN;   // [BN]
  int* flag = reinterpret_cast<int*>(mean + BN);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, r = 16 * warp + g;
  const int rows = min(BM, p.n - m0), cols = min(BN, p.m - n0);
  const bool ok0 = r < rows, ok1 = r + 8 < rows;
  // the first-row shift: row 0 is z₀ (rows r + 8 never are; with an external x₀ no row is)
  if (p.z0 && shift_keeps_row0(p) && m0 + r == 0) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      d[4 * j] = take_shift_row(p, d[4 * j], 0, n0 + 8 * j + 2 * t);
      d[4 * j + 1] = take_shift_row(p, d[4 * j + 1], 0, n0 + 8 * j + 2 * t + 1);
    }
  }
  // Z' or Y in 16 bits where p.z_type is OP: as it is (train's Z') or the affine (eval's Y of 33/39)
  constexpr bool k16 = OP != OPERAND_FP32 && Epi::kStore != Store::kBias;
  // The coefficients of a bias or an affine store, into coef
  const auto take_coef = [&] {
    for (int c = tid; c < BN; c += THREADS) {
      float a = 1.f, b = 0.f;
      if (c < cols) {
        if (Epi::kStore == Store::kBias) {
          b = p.z0 ? 0.f : vec_at<OP>(p.bias, n0 + c);  // (Z − Z₀ of the first-row shift has none)
        } else {
          const Affine ac = eval_affine<OP>(p, n0 + c, true);
          a = ac.a;
          b = ac.c;
        }
      }
      coef[c] = a;
      coef[BN + c] = b;
    }
    epilogue_sync<THREADS>();
  };
  // The four values of column pair j (columns 8j + 2t, + 1; rows r, r + 8) as stored: C + bias
  // (as store_tile), the affine, or as they are
  const auto stored = [&](int j, float& v0, float& v1, float& v2, float& v3) {
    const int c = 8 * j + 2 * t;
    if (Epi::kStore == Store::kBias) {
      v0 += coef[BN + c], v1 += coef[BN + c + 1], v2 += coef[BN + c], v3 += coef[BN + c + 1];
    } else if (Epi::kStore == Store::kAffine) {
      v0 = coef[c] * v0 + coef[BN + c], v1 = coef[c + 1] * v1 + coef[BN + c + 1];
      v2 = coef[c] * v2 + coef[BN + c], v3 = coef[c + 1] * v3 + coef[BN + c + 1];
    }
  };
  // Z' (or Y) stored from the registers
  const auto store_z = [&] {
    if (Epi::kStore != Store::kPlain) take_coef();
    float* row0 = out + (size_t)(m0 + r) * p.m + n0;
    float* row1 = row0 + (size_t)8 * p.m;
    const bool pairs = (p.m & 1) == 0 && ((uintptr_t)out & 7) == 0;  // 8-byte aligned column pairs
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int c = 8 * j + 2 * t;
      float v0 = d[4 * j], v1 = d[4 * j + 1], v2 = d[4 * j + 2], v3 = d[4 * j + 3];
      stored(j, v0, v1, v2, v3);
      if constexpr (k16) {
        if (p.z_type == OP) {  // 16 bits (elements, not floats, from out)
          const size_t e0 = (size_t)(m0 + r) * p.m + n0 + c, e1 = e0 + (size_t)8 * p.m;
          if (ok0) store_pair16<OP>(out, e0, v0, v1, c, cols, pairs);
          if (ok1) store_pair16<OP>(out, e1, v2, v3, c, cols, pairs);
          continue;
        }
      }
      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);
    }
  };
  // The tile's statistics, then its stores of Z' where it merges: the count's fence (count_tile)
  // then waits for the partials alone, not for the tile's stores as well (nothing in this kernel
  // reads Z'). Without a merge, or with the count handed over (DEFER), there is no fence, and the
  // stores go first, draining while the statistics are taken.
  // a 16-bit Z' (or eval's Y) by TMA: after the statistics (the staging area is this shared
  // memory), once the last tile's stores have read it
  bool tma = false;
  if constexpr (k16) tma = p.z_type == OP && zmap != nullptr;
  if ((!Epi::kMerge || DEFER) && !tma) store_z();
  if (tma) z_staging_drained<THREADS>(tid);
  bool last = false;
  if constexpr (Epi::kStats) {
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {  // 0: Σz → mean_t; 1: Σ(z − mean_t)² → M2_t
#pragma unroll
      for (int h = 0; h < V / CH; ++h) {  // CH of the thread's column values at a time (registers)
        float s[CH];
#pragma unroll
        for (int u = 0; u < CH; ++u) {  // q = 2j + e: column 8j + 2t + e, rows r and r + 8
          const int q = CH * h + u;
          s[u] = 0.f;
          if (q < NV) {
            const float z0 = d[4 * (q / 2) + q % 2], z1 = d[4 * (q / 2) + 2 + q % 2];
            if (pass == 0) {
              s[u] = z0 + z1;  // rows past N hold zeros
            } else {
              const float mu = mean[8 * (q / 2) + 2 * t + q % 2], e0 = z0 - mu, e1 = z1 - mu;
              s[u] = (ok0 ? e0 * e0 : 0.f) + (ok1 ? e1 * e1 : 0.f);
            }
          }
        }
        lane_butterfly(s, lane);  // (the same pairs of lanes whatever CH: the same bits)
#pragma unroll
        for (int i = 0; i < CH / 8; ++i) {
          const int q = CH * h + i + (CH / 8) * g;
          if (q < NV) red[warp * BN + 8 * (q / 2) + 2 * t + q % 2] = s[i];
        }
      }
      epilogue_sync<THREADS>();
      float total = 0.f;
      if (tid < BN)
        for (int w = 0; w < 8; ++w) total += red[w * BN + tid];
      if (pass == 0) {
        if (tid < BN) mean[tid] = total / (float)rows;
        epilogue_sync<THREADS>();  // means visible; red free for pass 1
      } else if (tid < cols) {
        const int tile = m0 / BM;
        p.part[(size_t)(2 * tile) * p.m + n0 + tid] = mean[tid];
        p.part[(size_t)(2 * tile + 1) * p.m + n0 + tid] = total;
        // one row tile (N ≤ 128, DEFER: no merge units): the partials are the column's moments, the
        // merge of one tile's (merge_in_order) the same bits
        if (Epi::kMerge && DEFER && p.n <= BM) column_done<OP>(p, n0 + tid, {(float)rows, mean[tid], total}, false);
      }
    }
    if (Epi::kMerge && !DEFER) last = count_tile<BM, BN, THREADS>(p, flag, n0, tid);
  }
  if constexpr (k16) {
    if (tma) {
      if constexpr (Epi::kStore == Store::kAffine) {  // eval's Y: the affine in the registers
        static_assert(BN <= THREADS, "a column a thread");
        if (tid < BN) coef[tid] = early.a, coef[BN + tid] = early.c;
        epilogue_sync<THREADS>();
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) stored(j, d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
      }
      epilogue_sync<THREADS>();  // the statistics' shared memory read (and the count's flag), or coef
      store_z_tma<OP, BN>(p, d, smem, zmap, m0, n0, tid);
      if (Epi::kMerge && last) z_staging_drained<THREADS>(tid);
    }
  }
  if (Epi::kMerge && !DEFER && !tma) store_z();
  if (Epi::kMerge && last) merge_block<BM, BN, THREADS, OP>(p, n0, tid);
}

// The same epilogues from the accumulators of the swapped GEMM (gemm_wgmma.cuh wg_swap), whose
// 128 × BN tile (BN = 128) is Zᵀ's: thread (warp, g, t) holds Z's columns j = j0 + 16·warp + g and
// j + 8, each at Z's rows n0 + 8i + 2t and + 1 (d[4i], d[4i + 1] for j; d[4i + 2], d[4i + 3] for j + 8).
// A column's values are in the registers of one quad: its statistics over the tile's rows are the
// thread's own sums, then two shuffles across the quad (lanes 4g … 4g + 3: the same bits in each),
// no shared memory; the partials (mean_t, M2_t) of row tile n0 / BN, as above (BN = 128 rows, the
// tiles and merge order of every other tensor-core path). Stores: for a fixed row, a warp's 8 g hold
// 8 consecutive columns, one 32-byte sector a store instruction. Zᵀ's column 0 at n0 = 0 is z₀
// under the first-row shift (X's parts left row 0 unshifted). Shared memory: one flag word.
template <int BN, class Epi>
__device__ __forceinline__ void epilogue_swapped(const Problem& p, float (&d)[BN / 2], float* smem, float* out,
                                                 int j0, int n0, int tid) {
  constexpr int THREADS = 256;
  static_assert(BN == 128, "row tiles of 128, as the statistics' partials and merge expect");
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int ja = j0 + 16 * warp + g, jb = ja + 8, rows = min(BN, p.n - n0);
  const bool oka = ja < p.m, okb = jb < p.m;
  if (p.z0 && shift_keeps_row0(p) && n0 == 0 && t == 0) {  // row 0 (i = 0, t = 0, first of the pair) is z₀
    if (oka) p.z0[ja] = d[0];
    if (okb) p.z0[jb] = d[2];
    d[0] = d[2] = 0.f;
  }
  float a[2] = {1.f, 1.f}, c[2] = {0.f, 0.f};  // columns ja, jb
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = h ? jb : ja;
    if (j >= p.m) continue;
    if (Epi::kStore == Store::kBias) {
      c[h] = p.z0 ? 0.f : vec_at<OPERAND_FP32>(p.bias, j);  // (Z − Z₀ of the first-row shift has none)
    } else if (Epi::kStore == Store::kAffine) {
      const Affine ac = eval_affine<OPERAND_FP32>(p, j, true);
      a[h] = ac.a, c[h] = ac.c;
    }
  }
  const auto store_z = [&] {  // Z' (or Y) stored
#pragma unroll
    for (int q = 0; q < BN / 4; ++q) {  // q = 2i + e: row n0 + 8i + 2t + e
      const int r = 8 * (q / 2) + 2 * t + q % 2;
      if (r >= rows) continue;
      float* row = out + (size_t)(n0 + r) * p.m;
      const float va = d[4 * (q / 2) + q % 2], vb = d[4 * (q / 2) + 2 + q % 2];
      if (oka) row[ja] = Epi::kStore == Store::kPlain ? va : a[0] * va + c[0];
      if (okb) row[jb] = Epi::kStore == Store::kPlain ? vb : a[1] * vb + c[1];
    }
  };
  if (!Epi::kMerge) store_z();  // as epilogue_from_fragments: stores first unless a count's fence follows
  bool last = false;
  if constexpr (Epi::kStats) {
    float mean[2] = {0.f, 0.f};
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {  // 0: Σz → mean_t; 1: Σ(z − mean_t)² → M2_t
      float s[2] = {0.f, 0.f};
#pragma unroll
      for (int q = 0; q < BN / 4; ++q) {
        if (8 * (q / 2) + 2 * t + q % 2 >= rows) continue;
        const float ea = d[4 * (q / 2) + q % 2] - mean[0], eb = d[4 * (q / 2) + 2 + q % 2] - mean[1];
        s[0] += pass ? ea * ea : ea;
        s[1] += pass ? eb * eb : eb;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        s[h] += __shfl_xor_sync(0xffffffffu, s[h], 1);
        s[h] += __shfl_xor_sync(0xffffffffu, s[h], 2);
      }
      if (pass == 0) {
        mean[0] = s[0] / (float)rows, mean[1] = s[1] / (float)rows;
      } else if (t == 0) {
        const size_t tile = n0 / BN;
        if (oka) p.part[2 * tile * p.m + ja] = mean[0], p.part[(2 * tile + 1) * p.m + ja] = s[0];
        if (okb) p.part[2 * tile * p.m + jb] = mean[1], p.part[(2 * tile + 1) * p.m + jb] = s[1];
      }
    }
    // blocks of the tile's 128 columns j0 …, counted by their ⌈N / BN⌉ row tiles of BN rows
    if (Epi::kMerge) last = count_tile<BN, 128, THREADS>(p, reinterpret_cast<int*>(smem), j0, tid);
  }
  if (Epi::kMerge) store_z();
  if (Epi::kMerge && last) merge_block<BN, 128, THREADS, OPERAND_FP32>(p, j0, tid);
}

// Shared memory an epilogue needs beside nothing else: the C tile and the scratch words.
template <int BM, int BN, int THREADS>
constexpr size_t epilogue_smem_bytes() {
  return ((size_t)BM * (BN + 1) + scratch_floats<THREADS, BN>()) * sizeof(float);
}

}  // namespace fl
