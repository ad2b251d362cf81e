// The fused train-mode backward of every stage, up to the two GEMMs (docs/design.md §10,
// notebook 08): from the saved Z (the GEMM output the forward normalised), the forward's
// output Y (84) and dY, three kernels give dZ' and the gradients of γ, β and the scale (dZ' by
// one of two, after dY's dtype):
//   row_dot_kernel           (84) r_i = Σ_j dY_ij·Y_ij, one block a row, 16-byte loads (4 of
//                            dY and 4 of Y a thread in flight)
//   backward_partials_kernel one pass over row tiles × 32 columns (64, a pair a thread, where dY
//                            is 16-bit): per tile the column partials of Z (mean_t,
//                            M2_t) and of G = Y∘(dY − r) (84) or dY (33): S1_t = Σ G, C_t = Σ G∘(Z − mean_t); the
//                            block of each column block's last tile (warp 0's tile counter +
//                            fence, as the forward's ColumnStatsMerge) merges them, the whole
//                            block bringing them in, in tile order (blocked) into μ, σ², S1 and
//                            S2 = Σ_i G∘(Z − μ) = Σ_t C_t + S1_t·(mean_t − μ) (Chan's merge of a
//                            cross moment: no cancellation), then dγ, dβ, the scale's column
//                            terms and the coefficients a1, a2, a0
//   backward_dz_kernel       (float32 dY, Y) dZ' = a1∘G + a2∘(Z − μ) + a0 on 32×32 tiles, written
//                            row-major (N×M, for dX = dZ'·W) and transposed through shared memory
//                            (M×N, for dW = dZ'ᵀ·X: both GEMMs then read K-major operands); for
//                            3xTF32 as TF32 parts [rna(dZ'); rna(dZ' − rna(dZ'))]
//   backward_dz16_kernel     (16-bit dY, Y) the same dZ' on 32×64 tiles, two adjacent columns a
//                            thread, row-major only, 4-byte stores
// dY and Y in bf16 or fp16 (p.operand, the 16-bit forward's output; docs/design.md §15): the
// three kernels read them as they are and widen each element to float32, every sum as above, and
// dZ' is written once, row-major, rounded to that dtype (both 16-bit GEMMs, cuBLAS's, take it
// as it is or transposed), where eager PyTorch's backward rounds it too.
// and, for dW = dZ'ᵀ(X − x̄) (equal to dZ'ᵀX since Σ_i dZ' = 0, without its cancellation when
// X's columns sit far from zero), three more kernels give X − x̄ or its TF32 parts:
//   x_chunk_sums_kernel      column sums of X over chunks of 512 rows
//   x_mean_kernel            x̄ from the chunk sums, in chunk order
//   x_center_kernel          X − x̄ (P = 1) or [rna(X − x̄); rna(X − x̄ − rna(X − x̄))] (P = 2, 3xTF32)
// Data parallelism (sync_phase): the passes stop at this rank's column sums (phase 1), and after
// the all-reduce of [S1; S2; Σ_i X; N] the columns take the ranks' totals (phase 2).
// No float atomics: every sum runs in a fixed order, so reruns are bit-identical. The Z the
// backward reads may hold the Linear's bias (naive, fold) or not (sums, fused): only Z − μ
// enters. Plain CUDA (no torch headers): compiles on its own for every GPU from sm_75 on.
// Specification: algebra.backward_tile_partials, algebra.train_backward_fused.
#include "common.cuh"

namespace fl {

struct BackwardProblem {
  const float* dy;          // (N, M) ∂L/∂Y (with operand ≠ OPERAND_FP32: the address of 16-bit elements)
  const float* y;           // (N, M) the forward's output (84) (likewise)
  const float* z;           // (N, M) the forward's saved GEMM output Z
  int z_type;               // its element type (Operand): float32, or the 16-bit type of a 16-bit module's Z'
                            //        (sums, fused: the forward's epilogue rounds it, as eager's Linear does)
  const float* scale;       // (1) or (M)
  const float* gamma;       // (M) bn.weight
  const float* beta;        // (M) bn.bias
  float* r;                 // (N) row terms (84)
  float* part;              // (T, 4, M) tile partials mean_t, M2_t, S1_t, C_t
  float* coef;              // (4, M) a1, a2, a0, μ
  unsigned int* counters;   // (ceil(M / 32)) zero before, left zero after
  float* dgamma;            // (M)
  float* dbeta;             // (M)
  float* dscale_cols;       // (M) the scale's gradient per column (84: summed by the caller)
  float* dz;                // (P, N, M) dZ' (P = 1) or its TF32 parts (P = 2); 16-bit operand: (N, M) in it
  float* dzt;               // (P, M, N) the same, transposed (16-bit operand: not written)
  int n, m, kind, scale_len, split;
  int operand;              // the element type of dY, Y and a 16-bit dZ' (common.cuh Operand)
  float eps;
  // Data parallelism (docs/design.md §14; fusedlib/cuda.py): the passes in two phases around one
  // all-reduce. Phase 1 stops at this rank's column sums, phase 2 takes the ranks' totals.
  int sync_phase;           // 0: one process; 1: up to this rank's sums; 2: from the totals
  int k;                    // in_features (the message's layout)
  const float* stats;       // (2, M) the global batch's μ and σ² of Z, the forward's (phases 1, 2)
  float* local;             // (4, M) this rank's S1, S2 (about μ), Σ(Z − μ), Σ(Z − μ)²
  float* message;           // (2M + K + 1) phase 1: [S1; S2; Σ_i X; N], what the all-reduce sums
  const float* total;       // phase 2: the message summed over the ranks
};

// The kernels below read Z in its element type ZT (p.z_type, a template argument: no runtime
// switch among the unrolled loads), widened exactly.

constexpr int kBwdCols = 32;       // columns a block of the partials and dZ' kernels
constexpr int kBwdGroups = 8;      // row groups (threadIdx.y)
constexpr int kBwdTileRows = 128;  // rows a statistics tile (algebra.BACKWARD_TILE_ROWS)
constexpr int kDzTile = 32;        // the dZ' kernels' rows a tile (and the float32 one's columns)
constexpr int kRowChunk = 8;       // elements a thread of row_dot_kernel takes at a time, in any dtype
constexpr int kRowBytes = 64;      // bytes of dY and of Y it loads at once (four 16-byte loads of each)
template <int OP>                  // the chunks those hold: 4 (16-bit), 2 (float32)
constexpr int kRowChunks = kRowBytes / (kRowChunk * (int)sizeof(typename Element<OP>::T));

__host__ __device__ inline int backward_tiles(int n) { return ceil_div(n, kBwdTileRows); }

// s plus Σ dY·Y over kRowChunks chunks v, v + B, … (B = blockDim.x) of a row of m elements of
// type OP (chunk v: elements kRowChunk·v …), the products added in chunk and element order.
// VEC (the rows 16-byte aligned: m·sizeof(T) a multiple of 16): 16-byte loads, all issued
// first, those past m zeros; else the elements below m one at a time. Either way, and in every
// dtype, the same order: the bits of r depend neither on the tensors' alignment nor on their
// dtype (a 16-bit dY and Y give the r of their float32 copies, bit for bit, as before).
// (Indices stay below m + 2¹⁵ < 2³¹: m ≤ kMaxDim.)
template <int OP, bool VEC>
__device__ __forceinline__ float row_dot_chunks(float s, const typename Element<OP>::T* dy,
                                                const typename Element<OP>::T* y, int v, int m) {
  using T = typename Element<OP>::T;
  constexpr int C = kRowChunks<OP>, E = 16 / (int)sizeof(T), L = kRowChunk / E;  // L 16-byte loads a chunk
  if constexpr (VEC) {
    uint4 a[C * L], b[C * L];  // 16-byte load l of chunk v + u·B in a[u·L + l]
#pragma unroll
    for (int k = 0; k < C * L; ++k) {
      const int w = (v + k / L * (int)blockDim.x) * L + k % L;  // the row's 16-byte piece w
      a[k] = b[k] = make_uint4(0, 0, 0, 0);
      if (E * w < m) a[k] = reinterpret_cast<const uint4*>(dy)[w], b[k] = reinterpret_cast<const uint4*>(y)[w];
    }
#pragma unroll
    for (int k = 0; k < C * L; ++k) {
      const T* ea = reinterpret_cast<const T*>(&a[k]);
      const T* eb = reinterpret_cast<const T*>(&b[k]);
#pragma unroll
      for (int e = 0; e < E; ++e) s += widen(ea[e]) * widen(eb[e]);
    }
  } else {
#pragma unroll
    for (int u = 0; u < C; ++u)
#pragma unroll
      for (int e = 0; e < kRowChunk; ++e) {
        const int j = kRowChunk * (v + u * (int)blockDim.x) + e;
        if (j < m) s += widen(dy[j]) * widen(y[j]);
      }
  }
  return s;
}

// r_i = Σ_j dY_ij·Y_ij (the softmax's row terms), one block a row, fixed order: thread t sums the
// row's chunks t, t + B, t + 2B, … (row_dot_chunks), then the block's sum (block_reduce).
template <int OP>
__global__ void row_dot_kernel(const BackwardProblem p) {
  using T = typename Element<OP>::T;
  __shared__ float red[32];
  const T* dy = reinterpret_cast<const T*>(p.dy) + (size_t)blockIdx.x * p.m;
  const T* y = reinterpret_cast<const T*>(p.y) + (size_t)blockIdx.x * p.m;
  const bool vec = p.m * sizeof(T) % 16 == 0 && (uintptr_t)p.dy % 16 == 0 && (uintptr_t)p.y % 16 == 0;
  float s = 0.f;
  for (int v = threadIdx.x; v < ceil_div(p.m, kRowChunk); v += kRowChunks<OP> * blockDim.x)
    s = vec ? row_dot_chunks<OP, true>(s, dy, y, v, p.m) : row_dot_chunks<OP, false>(s, dy, y, v, p.m);
  s = block_reduce<false>(s, red);
  if (threadIdx.x == 0) p.r[blockIdx.x] = s;
}

// The softmax's backward at one element (84): dV = Y·(dY − r_i).
__device__ __forceinline__ float softmax_dv(float y, float d, float r) { return y * (d - r); }

// G = dV (84) or dY (33) at element q of row i, dY and Y of element type OP.
template <int OP>
__device__ __forceinline__ float backward_grad(const BackwardProblem& p, bool k84, size_t q, int i) {
  const float d = load<OP>(p.dy, q);
  return k84 ? softmax_dv(load<OP>(p.y, q), d, p.r[i]) : d;
}

// V elements of type OP from element q of base (q a multiple of V, their bytes aligned to their
// size: V = 2, the column pairs of launch_train_backward), in one access: as stored (load_elements),
// widened as load does (load2), or rounded from a and b as store does (store2).
template <int OP, int V>
struct alignas(V * sizeof(typename Element<OP>::T)) Elements { typename Element<OP>::T e[V]; };
template <int OP, int V> __device__ __forceinline__ Elements<OP, V> load_elements(const float* base, size_t q) {
  return reinterpret_cast<const Elements<OP, V>*>(base)[q / V];
}
template <int OP> __device__ __forceinline__ float2 load2(const float* base, size_t q) {
  const Elements<OP, 2> v = load_elements<OP, 2>(base, q);
  return make_float2(widen(v.e[0]), widen(v.e[1]));
}
template <int OP> __device__ __forceinline__ void store2(float* base, size_t q, float a, float b) {
  reinterpret_cast<Elements<OP, 2>*>(base)[q / 2] = Elements<OP, 2>{{narrow<OP>(a), narrow<OP>(b)}};
}

// G at elements q, q + 1 of row i (q even, the pair aligned to its size: load2), as backward_grad.
template <int OP>
__device__ __forceinline__ float2 backward_grad2(const BackwardProblem& p, bool k84, size_t q, int i) {
  const float2 d = load2<OP>(p.dy, q);
  if (!k84) return d;
  const float2 y = load2<OP>(p.y, q);
  return make_float2(softmax_dv(y.x, d.x, p.r[i]), softmax_dv(y.y, d.y, p.r[i]));
}

// Column j's coefficients and parameter gradients from the merged sums (algebra.train_backward_fused):
// s1, s2 this process's (dγ, dβ, the scale's terms), g1, g2 over the n rows of the batch the
// statistics are of (the coefficients). One process: the same sums, n = N. Data parallelism:
// the ranks' totals, and 33's scale term in its rank form, from this rank's Σ(Z − μ) and
// Σ(Z − μ)² (zsum, zsq: the global form's identities hold over the global batch only).
__device__ __forceinline__ void backward_column(const BackwardProblem& p, int j, float mean, float var, float s1, float s2, float g1,
                                float g2, float n, bool rank_form = false, float zsum = 0.f, float zsq = 0.f) {
  const float s = p.scale_len == 1 ? p.scale[0] : p.scale[j], g = p.gamma[j];
  float sig, a2;
  if (p.kind == 84) {
    sig = sqrtf(var + p.eps);
    p.dbeta[j] = s * s1;
    p.dscale_cols[j] = g * s2 / sig + p.beta[j] * s1;
    a2 = -s * g * g2 / (n * sig * sig * sig);
  } else {
    sig = sqrtf(s * s * var + p.eps);
    p.dbeta[j] = s1;
    p.dscale_cols[j] = rank_form ? (g / sig) * (s2 - g1 * zsum / n - s * s * g2 * zsq / (n * sig * sig))
                                 : g * s2 * p.eps / (sig * sig * sig);
    a2 = -s * s * s * g * g2 / (n * sig * sig * sig);
  }
  p.dgamma[j] = s * s2 / sig;
  p.coef[j] = s * g / sig;
  p.coef[(size_t)p.m + j] = a2;  // (4M may pass 2³¹)
  p.coef[2 * (size_t)p.m + j] = -s * g * g1 / (n * sig);
  p.coef[3 * (size_t)p.m + j] = mean;
}

// Data parallelism, phase 1, column j (merged over this rank's n rows: mean, M2, S1 and the
// cross moment c about that mean): its sums about the global batch's μ (p.stats), the cross
// moment moved as the tiles' merge moves it: S2 = Σ G∘(Z − μ) = c + S1·(mean − μ),
// Σ(Z − μ) = n·(mean − μ), Σ(Z − μ)² = M2 + n·(mean − μ)²; S1 and S2 also into the message.
__device__ __forceinline__ void backward_rank_sums(const BackwardProblem& p, int j, float n, float mean, float m2, float s1, float c) {
  const size_t m = p.m;
  const float d = mean - p.stats[j], s2 = c + s1 * d;
  p.local[j] = s1;
  p.local[m + j] = s2;
  p.local[2 * m + j] = n * d;
  p.local[3 * m + j] = m2 + n * d * d;
  p.message[j] = s1;
  p.message[m + j] = s2;
}

// Data parallelism, phase 2: every column from this rank's sums (p.local) and the ranks' totals
// (p.total: S1, S2, …, N), about the global batch's μ and σ² (p.stats). Then backward_dz_kernel.
__global__ void backward_rank_columns_kernel(const BackwardProblem p) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.m) return;
  const size_t m = p.m;
  const float* l = p.local + j;
  backward_column(p, j, p.stats[j], p.stats[m + j], l[0], l[m], p.total[j], p.total[m + j],
                  p.total[2 * m + p.k], true, l[2 * m], l[3 * m]);
}

constexpr int kMergeStage = 8;  // row tiles a chunk of backward_merge_columns

// The column block's tiles merged, by the block of its last tile, every column in tile order,
// blocked (BlockedMerge: batches of millions of rows keep fp32 accuracy), the tile means taken
// about tile 0's (ref, as merge_quarter): Chan for (n, mean, M2), then S1 and the cross moment
// about the mean; then the column (backward_column), or this rank's sums (data parallelism,
// phase 1). The block's 256 threads bring kMergeStage tiles' partials of its W columns into
// shared memory (stage) at a time, the next chunk's loads in flight while warp v (v < V) merges
// this one, column V·c + v at lane c. (One warp loading a column's tiles as it merged them kept
// a few loads in flight: at 39, 128 tiles a column, the merges ran on after the last tiles with
// most SMs idle, 32 % of the kernel's SM cycles.)
template <int V>
__device__ __forceinline__ void backward_merge_columns(const BackwardProblem& p, float* stage, int T) {
  constexpr int W = V * kBwdCols, S = kMergeStage, B = kBwdCols * kBwdGroups;
  const int tid = threadIdx.y * kBwdCols + threadIdx.x, lc = V * threadIdx.x + threadIdx.y;
  const int j0 = blockIdx.x * W, j = j0 + lc;
  const bool merges = threadIdx.y < V && j < p.m;
  const float ref = merges ? __ldcg(p.part + j) : 0.f;
  // Chunk u0 of NK partials (NK = 2: mean_t, M2_t; NK = 3: mean_t, S1_t, C_t) of tiles u0 …
  // u0 + S − 1 as stage[(s·NK + k)·W + col]: each thread's NK·S·W / B loads issued by chunk (a tile
  // past T reads tile T − 1, a column past M column M − 1: never merged), stored by put.
  const auto chunk = [&](auto nk, int u0, float* v) {
    constexpr int NK = decltype(nk)::value;
#pragma unroll
    for (int a = 0; a < NK * S * W / B; ++a) {
      const int e = tid + a * B, col = e % W, k = e / W % NK, u = min(u0 + e / (W * NK), T - 1);
      const int which = NK == 2 || k == 0 ? k : k + 1;  // the partial's plane (mean_t, M2_t, S1_t, C_t)
      v[a] = __ldcg(p.part + (size_t)(4 * u + which) * p.m + min(j0 + col, p.m - 1));
    }
  };
  const auto put = [&](auto nk, const float* v) {
    constexpr int NK = decltype(nk)::value;
    __syncthreads();  // the chunk before merged
#pragma unroll
    for (int a = 0; a < NK * S * W / B; ++a) stage[tid + a * B] = v[a];
    __syncthreads();
  };
  using Two = std::integral_constant<int, 2>;
  using Three = std::integral_constant<int, 3>;
  float v[3 * S * W / B];
  const auto chan = [](Moments a, Moments b) { return chan_merge(a, b); };
  BlockedMerge<Moments, decltype(chan)> acc{T, chan};
  chunk(Two{}, 0, v);
  for (int u0 = 0; u0 < T; u0 += S) {
    put(Two{}, v);
    if (u0 + S < T) chunk(Two{}, u0 + S, v);
    if (merges)
#pragma unroll 1
      for (int s = 0; s < S && u0 + s < T; ++s) {
        const int u = u0 + s;
        acc.add(u, Moments{(float)min(kBwdTileRows, p.n - u * kBwdTileRows), stage[2 * s * W + lc] - ref,
                           stage[(2 * s + 1) * W + lc]});
      }
  }
  const Moments mo = acc.total;
  const auto add = [](float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); };
  BlockedMerge<float2, decltype(add)> s12{T, add};
  chunk(Three{}, 0, v);
  for (int u0 = 0; u0 < T; u0 += S) {
    put(Three{}, v);
    if (u0 + S < T) chunk(Three{}, u0 + S, v);
    if (merges)
#pragma unroll 1
      for (int s = 0; s < S && u0 + s < T; ++s) {
        const float su = stage[(3 * s + 1) * W + lc];
        s12.add(u0 + s, make_float2(su, stage[(3 * s + 2) * W + lc] + su * ((stage[3 * s * W + lc] - ref) - mo.mean)));
      }
  }
  if (!merges) return;
  const float2 s = s12.total;
  if (p.sync_phase == 1) return backward_rank_sums(p, j, mo.n, mo.mean + ref, mo.m2, s.x, s.y);
  backward_column(p, j, mo.mean + ref, mo.m2 / mo.n, s.x, s.y, s.x, s.y, (float)p.n);
}

// Block (32, 8) on row tile t = tile0 + blockIdx.y × the W = V·32 columns from W·blockIdx.x: thread
// (c, g) holds rows g, g + 8, … of columns j … j + V − 1 (j = W·blockIdx.x + V·c) in registers, as
// loaded (a 16-bit pair in one), widened where used; the 8 row groups' sums are added in group
// order. Warp 0 (g = 0) writes the tile's partials, fences and counts the tile; the block of the
// column block's last tile merges them (backward_merge_columns), the others return.
// V = 2 (a 16-bit dY, M even, the tensors aligned to pairs: launch_train_backward): one load
// of each operand a column pair, so that a warp reads 128 bytes of a 16-bit row at once, not 64.
// Each column's sums run in the same order for either V: the same bits.
// (__launch_bounds__' minimum of blocks an SM, none spilling on any architecture of the compile
// matrix: 33 with a 16-bit operand 3 (80 registers on sm_90a); 84, and 33 in float32, 2 (109–128
// and 85). Left to ptxas, float32 33 took 64 and spilled on sm_100; at 3 it spilled there too.)
template <bool K84, int OP, int ZT, int V>
constexpr int partials_min_blocks() {
  return K84 || (OP == OPERAND_FP32 && ZT == OPERAND_FP32) ? 2 : 3;
}
template <bool K84, int OP, int ZT, int V>
__global__ void __launch_bounds__(kBwdCols * kBwdGroups, partials_min_blocks<K84, OP, ZT, V>())
    backward_partials_kernel(const BackwardProblem p, int tile0) {
  static_assert(V == 1 || V == 2, "one column a thread, or a pair");
  constexpr int U = kBwdTileRows / kBwdGroups, W = V * kBwdCols;  // W columns a block
  constexpr int kRed = 4 * kBwdGroups * (W + 1), kStage = 3 * kMergeStage * W;
  __shared__ float smem[kRed > kStage ? kRed : kStage];  // the row groups' sums, then the merge's chunks
  __shared__ unsigned last_tile;
  const auto red = [&](int k, int q, int col) -> float& { return smem[(k * kBwdGroups + q) * (W + 1) + col]; };
  const int c = threadIdx.x, g = threadIdx.y, j = blockIdx.x * W + V * c, t = tile0 + blockIdx.y;
  const int T = backward_tiles(p.n);  // over every launch (kMaxGridY row tiles each: common.cuh)
  const int r0 = t * kBwdTileRows, rows = min(kBwdTileRows, p.n - r0);
  const bool col_ok = j < p.m;  // (V = 2: M even, so j + 1 < M as well)
  // Every row's loads first, unguarded (a row past the tile reads the tile's row 0, a column past M
  // column 0: never summed), in one block of code, so that they are all in flight at once; then
  // the sums. (Loads guarded row by row, each followed by its add, are a branch a row in the PTX,
  // with about two loads a thread in flight: 39 in bf16 moved 0.9 TB/s so.)
  Elements<ZT, V> z[U];
  Elements<OP, V> dy[U], y[K84 ? U : 1];
  float r[K84 ? U : 1];
  const int jc = col_ok ? j : 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = g + kBwdGroups * u, ic = i < rows ? i : 0;
    const size_t q = (size_t)(r0 + ic) * p.m + jc;
    z[u] = load_elements<ZT, V>(p.z, q);
    dy[u] = load_elements<OP, V>(p.dy, q);
    if constexpr (K84) y[u] = load_elements<OP, V>(p.y, q), r[u] = p.r[r0 + ic];
  }
  float sz[V], mean[V], m2[V], s1[V], cr[V];
#pragma unroll
  for (int v = 0; v < V; ++v) sz[v] = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (g + kBwdGroups * u < rows) {
#pragma unroll
      for (int v = 0; v < V; ++v) sz[v] += widen(z[u].e[v]);
    }
#pragma unroll
  for (int v = 0; v < V; ++v) red(0, g, V * c + v) = sz[v];
  __syncthreads();
#pragma unroll
  for (int v = 0; v < V; ++v) {
    mean[v] = 0.f;
    for (int q = 0; q < kBwdGroups; ++q) mean[v] += red(0, q, V * c + v);
    mean[v] /= (float)rows;
    m2[v] = s1[v] = cr[v] = 0.f;
  }
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (g + kBwdGroups * u < rows) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float d = widen(z[u].e[v]) - mean[v], dyv = widen(dy[u].e[v]);
        const float gr = K84 ? softmax_dv(widen(y[u].e[v]), dyv, r[u]) : dyv;  // G (backward_grad)
        m2[v] += d * d;
        s1[v] += gr;
        cr[v] += gr * d;
      }
    }
#pragma unroll
  for (int v = 0; v < V; ++v) {
    red(1, g, V * c + v) = m2[v];
    red(2, g, V * c + v) = s1[v];
    red(3, g, V * c + v) = cr[v];
  }
  __syncthreads();
  if (g == 0) {
    if (col_ok) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float tot[3] = {0.f, 0.f, 0.f};
        for (int q = 0; q < kBwdGroups; ++q)
#pragma unroll
          for (int k = 0; k < 3; ++k) tot[k] += red(1 + k, q, V * c + v);
        float* pt = p.part + (size_t)(4 * t) * p.m + j + v;
        pt[0] = mean[v];
        pt[p.m] = tot[0];
        pt[2 * (size_t)p.m] = tot[1];
        pt[3 * (size_t)p.m] = tot[2];
      }
    }
    __threadfence();  // this tile's partials visible device-wide before it is counted
    __syncwarp();  // every lane fenced before lane 0 counts
    if (c == 0) {
      const bool last = atomicAdd(p.counters + blockIdx.x, 1u) == (unsigned)T - 1;
      if (last) p.counters[blockIdx.x] = 0;  // every tile of the block has counted
      last_tile = last;
    }
  }
  __syncthreads();
  if (!last_tile) return;
  __threadfence();
  backward_merge_columns<V>(p, smem, T);
}

// Column j's dZ' coefficients (backward_column), and dZ' = a1·G + a2·(Z − μ) + a0 of one element
// from them, its G and its Z, the roundings spelled out: fma(a1, G, a2·(Z − μ)) + a0, what nvcc
// made of the expression on every GPU (left to nvcc, the code around it can tip the contraction
// to fma(a2, Z − μ, a1·G), other bits). Both dZ' kernels: the same operations, the same bits.
struct DzCoef { float a1, a2, a0, mu; };
__device__ __forceinline__ DzCoef dz_coef(const BackwardProblem& p, int j) {
  const float* coef = p.coef + j;  // a1, a2, a0, μ of column j, M apart
  return {coef[0], coef[p.m], coef[2 * (size_t)p.m], coef[3 * (size_t)p.m]};
}
__device__ __forceinline__ float dz_value(const DzCoef& a, float g, float z) {
  return __fadd_rn(__fmaf_rn(a.a1, g, __fmul_rn(a.a2, z - a.mu)), a.a0);
}

// dZ' (float32 dY, Y) on a 32×32 tile: row-major store (coalesced along columns), then through
// shared memory the transposed store (coalesced along rows). SPLIT: TF32 parts.
template <bool K84, bool SPLIT, int ZT>
__global__ void __launch_bounds__(kDzTile * kBwdGroups) backward_dz_kernel(const BackwardProblem p, int tile0) {
  constexpr int P = SPLIT ? 2 : 1;
  __shared__ float tile[P][kDzTile][kDzTile + 1];
  const int c = threadIdx.x, g = threadIdx.y;
  const int i0 = (tile0 + blockIdx.y) * kDzTile, j0 = blockIdx.x * kDzTile, j = j0 + c;
  const size_t plane = (size_t)p.n * p.m;
  if (j < p.m) {
    const DzCoef a = dz_coef(p, j);
    for (int u = g; u < kDzTile && i0 + u < p.n; u += kBwdGroups) {
      const int i = i0 + u;
      const size_t q = (size_t)i * p.m + j;
      const float v = dz_value(a, backward_grad<OPERAND_FP32>(p, K84, q, i), load<ZT>(p.z, q));
      if (SPLIT) {
        const float big = __uint_as_float(to_tf32(v)), small = __uint_as_float(to_tf32(v - big));
        p.dz[q] = tile[0][u][c] = big;
        p.dz[plane + q] = tile[1][u][c] = small;
      } else {
        p.dz[q] = tile[0][u][c] = v;
      }
    }
  }
  __syncthreads();
  const int i = i0 + c;
  if (i >= p.n) return;
  for (int u = g; u < kDzTile && j0 + u < p.m; u += kBwdGroups) {
    const size_t q = (size_t)(j0 + u) * p.n + i;
#pragma unroll
    for (int k = 0; k < P; ++k) p.dzt[k * plane + q] = tile[k][c][u];
  }
}

// dZ' for 16-bit dY and Y (OP), row-major alone, rounded to that dtype: a 32-row × 64-column
// tile a block, thread (c, g) on columns j, j + 1 (j = 64·blockIdx.x + 2c) of rows g, g + 8, ….
// Pairs (M even, the tensors aligned to them): 4-byte loads of dY and Y and stores of dZ',
// 8-byte loads of a float32 Z (4-byte of a 16-bit one); otherwise element by element. Every element
// as backward_dz_kernel's (dz_value).
template <bool K84, int OP, int ZT>
__global__ void __launch_bounds__(kDzTile * kBwdGroups) backward_dz16_kernel(const BackwardProblem p, int tile0) {
  static_assert(OP != OPERAND_FP32, "float32 dZ' is backward_dz_kernel's");
  const int g = threadIdx.y, i0 = (tile0 + blockIdx.y) * kDzTile;
  const int j = 2 * (blockIdx.x * kDzTile + threadIdx.x);  // (below M + 64 < 2³¹)
  if (j >= p.m) return;
  const bool pairs = p.m % 2 == 0 && (uintptr_t)p.dy % 4 == 0 && (!K84 || (uintptr_t)p.y % 4 == 0) &&
                     (uintptr_t)p.dz % 4 == 0 && (uintptr_t)p.z % (ZT == OPERAND_FP32 ? 8 : 4) == 0;
  const bool second = j + 1 < p.m;  // (M odd: the last thread has one column)
  const DzCoef a = dz_coef(p, j), b = second ? dz_coef(p, j + 1) : a;
  for (int u = g; u < kDzTile && i0 + u < p.n; u += kBwdGroups) {
    const int i = i0 + u;
    const size_t q = (size_t)i * p.m + j;
    if (pairs) {
      const float2 gr = backward_grad2<OP>(p, K84, q, i), z = load2<ZT>(p.z, q);
      store2<OP>(p.dz, q, dz_value(a, gr.x, z.x), dz_value(b, gr.y, z.y));
    } else {
      store<OP>(p.dz, q, dz_value(a, backward_grad<OP>(p, K84, q, i), load<ZT>(p.z, q)));
      if (second) store<OP>(p.dz, q + 1, dz_value(b, backward_grad<OP>(p, K84, q + 1, i), load<ZT>(p.z, q + 1)));
    }
  }
}

// ---------------------------------------------------------------- X − x̄ for dW
constexpr int kXChunkRows = 512;  // rows a chunk of x_chunk_sums_kernel

// part[c][j] = Σ_{i in chunk c} X_ij; block (32, 8): a column a thread column, the 8 row
// groups added in order; grid (ceil(K / 32), ceil(N / 512)) in launches of kMaxGridY chunks from
// chunk0 (common.cuh), chunk chunk0 + blockIdx.y.
__global__ void __launch_bounds__(256) x_chunk_sums_kernel(const float* __restrict__ x, float* __restrict__ part,
                                                           int n, int k, int chunk0) {
  __shared__ float red[kBwdGroups][33];
  const int chunk = chunk0 + blockIdx.y, j = blockIdx.x * 32 + threadIdx.x, r0 = chunk * kXChunkRows;
  const int r1 = min(n, r0 + kXChunkRows);
  float s = 0.f;
  if (j < k)
    for (int i = r0 + threadIdx.y; i < r1; i += kBwdGroups) s += x[(size_t)i * k + j];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < k) {
    float t = 0.f;
    for (int g = 0; g < kBwdGroups; ++g) t += red[g][threadIdx.x];
    part[(size_t)chunk * k + j] = t;
  }
}

// x̄_j = Σ_c part[c][j] / N, the chunks in order; a thread a column. With count (data
// parallelism, phase 1): the sum itself, and N into *count, the message's share.
__global__ void x_mean_kernel(const float* __restrict__ part, float* __restrict__ mean, int n, int k,
                              float* count = nullptr) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= k) return;
  float t = 0.f;
  for (int c = 0; c < ceil_div(n, kXChunkRows); ++c) t += part[(size_t)c * k + j];
  mean[j] = count ? t : t / (float)n;
  if (count && j == 0) *count = (float)n;
}

// Data parallelism, phase 2: x̄_j of the global batch from the ranks' total Σ_i X (sums) and N.
__global__ void x_mean_of_total_kernel(const float* __restrict__ sums, const float* __restrict__ count,
                                       float* __restrict__ mean, int k) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < k) mean[j] = sums[j] / *count;
}

// out = X − x̄ (SPLIT false) or its TF32 parts in planes out[0], out[1] (SPLIT true),
// elementwise, coalesced; mean null: X itself (W's TF32 parts, the W operand of 3xTF32's dX).
template <bool SPLIT>
__global__ void x_center_kernel(const float* __restrict__ x, const float* __restrict__ mean, float* __restrict__ out,
                                int n, int k) {
  const size_t nk = (size_t)n * k;
  for (size_t at = blockIdx.x * (size_t)blockDim.x + threadIdx.x; at < nk; at += (size_t)gridDim.x * blockDim.x) {
    const float v = mean ? x[at] - mean[at % k] : x[at];
    if (SPLIT) {  // algebra.tf32_split
      const float big = __uint_as_float(to_tf32(v));
      out[at] = big;
      out[nk + at] = __uint_as_float(to_tf32(v - big));
    } else {
      out[at] = v;
    }
  }
}

}  // namespace fl

namespace fl {

// Σ_i X into mean (count null: x̄ = that / N; else the sum, and N into *count) with
// ceil(N / 512)·K floats of scratch for the chunk sums.
inline const char* launch_x_mean(const float* x, float* scratch, float* mean, int n, int k, float* count,
                                 cudaStream_t st) {
  const int chunks = ceil_div(n, kXChunkRows);
  for (int c0 = 0; c0 < chunks; c0 += kMaxGridY) {
    const dim3 grid(ceil_div(k, 32), std::min(chunks - c0, kMaxGridY));
    x_chunk_sums_kernel<<<grid, dim3(32, kBwdGroups), 0, st>>>(x, scratch, n, k, c0);
    FL_CHECK_LAUNCH();
  }
  x_mean_kernel<<<ceil_div(k, 256), 256, 0, st>>>(scratch, mean, n, k, count);
  FL_CHECK_LAUNCH();
  return nullptr;
}

inline const char* launch_x_center(const float* x, const float* mean, float* out, int n, int k, bool split,
                                   cudaStream_t st) {
  if (split) x_center_kernel<true><<<sm_count() * 8, 256, 0, st>>>(x, mean, out, n, k);
  else x_center_kernel<false><<<sm_count() * 8, 256, 0, st>>>(x, mean, out, n, k);
  FL_CHECK_LAUNCH();
  return nullptr;
}

}  // namespace fl

// X − x̄ (N×K) into out (split: its TF32 parts, 2·N·K floats) on stream st, with
// (ceil(N / 512) + 1)·K floats of scratch: the chunk sums, then x̄ (nullptr: no error).
// Data parallelism: total (phase 2: the ranks' Σ_i X, K floats, then N) gives the global x̄ instead.
extern "C" const char* fl_center_x(const float* x, float* out, float* scratch, int n, int k, bool split,
                                   const float* total, cudaStream_t st) {
  using namespace fl;
  float* mean = scratch + (size_t)ceil_div(n, kXChunkRows) * k;
  const char* err;
  if (total) {
    x_mean_of_total_kernel<<<ceil_div(k, 256), 256, 0, st>>>(total, total + k, mean, k);
    FL_CHECK_LAUNCH();
  } else if ((err = launch_x_mean(x, scratch, mean, n, k, nullptr, st))) {
    return err;
  }
  return launch_x_center(x, mean, out, n, k, split, st);
}

// Data parallelism, phase 1: this rank's Σ_i X and N into message (K + 1 floats), with
// ceil(N / 512)·K floats of scratch.
extern "C" const char* fl_x_sums(const float* x, float* message, float* scratch, int n, int k, cudaStream_t st) {
  return fl::launch_x_mean(x, scratch, message, n, k, message + k, st);
}

// W's TF32 parts [rna(W); rna(W − rna(W))] (2·rows·k floats) into out on stream st, from W as
// it is now: 3xTF32's W operand of dX = dZ'·W (nullptr: no error).
extern "C" const char* fl_tf32_parts(const float* w, float* out, int rows, int k, cudaStream_t st) {
  using namespace fl;
  return launch_x_center(w, nullptr, out, rows, k, true, st);
}

namespace fl {

// The three kernels for dY and Y of element type OP (a 16-bit OP: one process, no split) and Z
// of type ZT.
template <int OP, int ZT>
const char* launch_train_backward(const BackwardProblem& p, cudaStream_t st) {
  const bool k84 = p.kind == 84;
  const dim3 block(kBwdCols, kBwdGroups);
  if (p.sync_phase != 2) {
    if (k84) {
      row_dot_kernel<OP><<<p.n, 256, 0, st>>>(p);
      FL_CHECK_LAUNCH();
    }
    // row tiles in launches of at most kMaxGridY (common.cuh): N > 2 097 120 takes several dZ' launches
    // column pairs (V = 2) where dY is 16-bit and every operand is aligned to them
    constexpr size_t dy_pair = 2 * sizeof(typename Element<OP>::T), z_pair = 2 * sizeof(typename Element<ZT>::T);
    const bool pairs = OP != OPERAND_FP32 && p.m % 2 == 0 && (uintptr_t)p.dy % dy_pair == 0 &&
                       (!k84 || (uintptr_t)p.y % dy_pair == 0) && (uintptr_t)p.z % z_pair == 0;
    auto partials = k84 ? backward_partials_kernel<true, OP, ZT, 1> : backward_partials_kernel<false, OP, ZT, 1>;
    if constexpr (OP != OPERAND_FP32)
      if (pairs) partials = k84 ? backward_partials_kernel<true, OP, ZT, 2> : backward_partials_kernel<false, OP, ZT, 2>;
    const int tiles = backward_tiles(p.n), cols = (pairs ? 2 : 1) * kBwdCols;
    for (int t0 = 0; t0 < tiles; t0 += kMaxGridY) {
      partials<<<dim3(ceil_div(p.m, cols), std::min(tiles - t0, kMaxGridY)), block, 0, st>>>(p, t0);
      FL_CHECK_LAUNCH();
    }
    if (p.sync_phase == 1) return nullptr;
  } else {
    backward_rank_columns_kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p);
    FL_CHECK_LAUNCH();
  }
  // dZ': float32 on 32×32 tiles, 16-bit on 32×64 tiles (a column pair a thread)
  void (*dz)(const BackwardProblem, int);
  if constexpr (OP == OPERAND_FP32) {
    if (p.split) dz = k84 ? backward_dz_kernel<true, true, ZT> : backward_dz_kernel<false, true, ZT>;
    else dz = k84 ? backward_dz_kernel<true, false, ZT> : backward_dz_kernel<false, false, ZT>;
  } else {
    dz = k84 ? backward_dz16_kernel<true, OP, ZT> : backward_dz16_kernel<false, OP, ZT>;
  }
  const int dz_cols = OP == OPERAND_FP32 ? kDzTile : 2 * kDzTile, dz_tiles = ceil_div(p.n, kDzTile);
  for (int t0 = 0; t0 < dz_tiles; t0 += kMaxGridY) {
    dz<<<dim3(ceil_div(p.m, dz_cols), std::min(dz_tiles - t0, kMaxGridY)), block, 0, st>>>(p, t0);
    FL_CHECK_LAUNCH();
  }
  return nullptr;
}

// Z's type, a template argument: float32, or a 16-bit Z' (sums, fused) in OP's type, or beside
// float32 dY and Y (autocast: the scale promotes Y) in either 16-bit type.
template <int OP>
const char* launch_train_backward(const BackwardProblem& p, cudaStream_t st) {
  if (p.z_type == OPERAND_FP32) return launch_train_backward<OP, OPERAND_FP32>(p, st);
  if constexpr (OP != OPERAND_FP32) {
    if (p.z_type == OP) return launch_train_backward<OP, OP>(p, st);
  } else {
    if (p.z_type == OPERAND_BF16) return launch_train_backward<OP, OPERAND_BF16>(p, st);
    if (p.z_type == OPERAND_FP16) return launch_train_backward<OP, OPERAND_FP16>(p, st);
  }
  return "z: a 16-bit Z takes dY and Y in its type or in float32";
}

}  // namespace fl

// The three kernels of the fused backward on stream st (nullptr: no error). Data parallelism:
// phase 1 the row terms and the partials (this rank's sums), phase 2 the columns from the
// ranks' totals and dZ'.
extern "C" const char* fl_train_backward(const fl::BackwardProblem* pp, cudaStream_t st) {
  using namespace fl;
  const BackwardProblem& p = *pp;
  if (p.operand != OPERAND_FP32 && (p.split || p.sync_phase != 0))
    return "a 16-bit dY and Y take one process and no TF32 split";
  switch (p.operand) {
    case OPERAND_BF16: return launch_train_backward<OPERAND_BF16>(p, st);
    case OPERAND_FP16: return launch_train_backward<OPERAND_FP16>(p, st);
    default: return launch_train_backward<OPERAND_FP32>(p, st);
  }
}
