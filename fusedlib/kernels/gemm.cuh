// The GEMM engine: out(N×M) = X Wᵀ through the epilogue Epi (epilogue.cuh), on the mainloop
// of the path the host chose (p.path, fusedlib/engine.py select_path). Every stage calls
// launch_gemm<Epi>; for a given GPU, precision and shape all four stages get the same
// mainloop and the same tile, so what differs between two stages is the fusion alone.
//   PATH_SIMT   fp32, FFMA, any GPU: square tiles of 128 (8×8 outputs a thread; 128×64 where a
//               block cannot have the 128×128 tile's 66 KB of shared memory, sm_75), or the
//               largest of 64 and 32 (4×4 a thread) whose grid has at least kMinGrid tiles
//               (KernelBench v0 gets 64 tiles of 32×32 instead of 4 of 128×128), and where
//               even those leave SMs idle, split-K (simt_split_k)
//   PATH_MMA    tf32 / 3xtf32, mma.sync m16n8k8, sm_80 on: 128×128 tiles
//   PATH_WGMMA  tf32 / 3xtf32, TMA + wgmma, sm_90a: 128×256 or 128×64 (tf32) or 128×192 / 128×168 (3xtf32, per shape) tiles
// bf16 / fp16 operands (p.operand, docs/design.md §15) run the tf32 tiles of mma.sync or wgmma with
// 16-bit instructions (exact products, fp32 sums).
// Statistics tiles are therefore 128 rows on the tensor-core paths and 128, 64 or 32 on SIMT
// (gemm_tile_rows; algebra.tile_rows is the same rule).
#pragma once
#include "gemm_mma.cuh"
#include "gemm_simt.cuh"
#include "gemm_wgmma.cuh"

namespace fl {

// The H100's SM count, fixed (algebra.MIN_GRID), not the device's: it picks the SIMT tile and so
// the statistics tiles and their merge order, which must not depend on the GPU at hand.
constexpr int kMinGrid = 132;
constexpr int kSimtTiles[3] = {128, 64, 32};  // algebra.SIMT_TILES

// $FUSEDLIB_SIMT_SMALL_SMEM=1 runs the 128×64 tile of GPUs whose blocks get less shared
// memory (sm_75) on any GPU, so that the tests validate that path where it never runs itself.
inline bool small_smem_forced() {
  const char* v = std::getenv("FUSEDLIB_SIMT_SMALL_SMEM");
  return v && v[0] == '1';
}

inline bool fills_grid(const Problem& p, int tile) {
  return (long long)ceil_div(p.m, tile) * ceil_div(p.n, tile) >= kMinGrid;  // (tile counts past 2³¹)
}

// Rows per statistics tile (the GEMM's block height BM) for this problem and path.
inline int gemm_tile_rows(const Problem& p) {
  if (p.path != PATH_SIMT) return 128;  // kMmaBM == kWgBM
  for (int t : kSimtTiles)
    if (fills_grid(p, t)) return t;
  return kSimtTiles[2];
}

// The split-K plan of a SIMT GEMM (host): S = 1 unless even the 32×32 tiles number fewer than
// kMinGrid; then as many splits as give the SMs their 4 blocks of the 32×32 kernel (the SM
// count of this device), each of at least kMinSplitSteps K steps, at most kMaxSplits
// (epilogue.cuh); KernelBench v0 (128×1024→512): 64 tiles, 8 splits of 8 K steps.
// $FUSEDLIB_SIMT_SPLITK=S forces S on the 32×32 tile (tests; clamped to 1 … the K steps). Statistics tiles are
// unchanged (gemm_tile_rows): the splits are summed before the epilogue.
constexpr int kSimtSplitBlocks = 4, kSimtSplitBK = 16;  // the 32×32 kernel's MIN_BLOCKS and BK
inline SplitK simt_split_k(int n, int k, int m) {
  const int t = kSimtTiles[2], tiles = ceil_div(n, t) * ceil_div(m, t), KT = ceil_div(k, kSimtSplitBK);
  if (ceil_div(n, kSimtTiles[1]) * ceil_div(m, kSimtTiles[1]) >= kMinGrid) return {1, tiles, t * t};  // not the 32×32 tile
  const char* forced = std::getenv("FUSEDLIB_SIMT_SPLITK");
  int s = 1;
  if (forced && std::atoi(forced) > 0) s = std::atoi(forced);
  else if (tiles < kMinGrid) s = std::min(std::min(kSimtSplitBlocks * sm_count() / tiles, KT / kMinSplitSteps), kMaxSplits);
  s = std::max(1, std::min(s, KT));
  return {s, tiles, t * t};
}

template <class Epi>
const char* launch_gemm(const Problem& p, const float* x, const float* w, float* out, cudaStream_t st) {
  static_assert(kMmaBM == 128 && kWgBM == 128, "gemm_tile_rows assumes 128-row tensor-core tiles");
  if (p.operand != OPERAND_FP32 && p.path == PATH_SIMT)
    return "bf16/fp16 operands run on the tensor cores (mma.sync or wgmma), not on the SIMT GEMM";
  switch (p.path) {
    case PATH_SIMT:
      if (p.precision != FP32) return "the SIMT GEMM runs fp32 only (tf32/3xtf32 need a tensor-core path)";
      if (p.splits > 1) {
        if (gemm_tile_rows(p) != kSimtTiles[2]) return "SIMT split-K runs the 32×32 tile only (simt_split_k)";
        if (!(p.splitk && p.splitk_counters)) return "the split-K SIMT GEMM needs its workspace";
        return launch_simt_gemm<32, 32, kSimtSplitBK, 4, 4, kSimtSplitBlocks, Epi, true>(p, x, w, out, st);
      }
      switch (gemm_tile_rows(p)) {  // <BM, BN, BK, TM, TN, MIN_BLOCKS> (variants timed: run59–run61)
        case 128:
          if (max_smem_optin() >= (int)SimtTile<128, 128, 16, 8, 8>::kSmem && !small_smem_forced())
            return launch_simt_gemm<128, 128, 16, 8, 8, 1, Epi>(p, x, w, out, st);
          return launch_simt_gemm<128, 64, 8, 8, 8, 1, Epi>(p, x, w, out, st);
        case 64: return launch_simt_gemm<64, 64, 16, 4, 4, 2, Epi>(p, x, w, out, st);
        default: return launch_simt_gemm<32, 32, kSimtSplitBK, 4, 4, kSimtSplitBlocks, Epi>(p, x, w, out, st);
      }
    case PATH_MMA:
      if (p.precision == FP32) return "the mma.sync GEMM runs tf32/3xtf32 only (fp32 runs the SIMT GEMM)";
      return launch_mma_gemm<Epi>(p, x, w, out, st);
    case PATH_WGMMA:
      if (p.precision == FP32) return "the wgmma GEMM runs tf32/3xtf32 only (fp32 runs the SIMT GEMM)";
      return launch_wgmma_gemm<Epi>(p, x, w, out, st);
    default:
      return "unknown GEMM path (expected 0 simt, 1 mma, 2 wgmma)";
  }
}

}  // namespace fl
