// Stage 4, fused: the GEMM's ColumnStatsMerge epilogue stores Z' = XWᵀ and its row tile's
// column partials, and the last tile of each column block (tile counter + fence) merges all
// row tiles in order into a, c and the running buffers. Then one row pass reads Z' once:
// V = a∘Z' + c and (84) the softmax from online (max, Σexp) partials, writing Y once.
// What changes from sums: the finalize kernel moves into the epilogue and the row softmax
// reads each row once (online). Eval mode: as sums (coefficients from the running buffers
// in the GEMM's AffineStore epilogue), then the online softmax (84). Two kernels a forward;
// one in train mode on the persistent wgmma GEMM, whose CTAs (one an SM, launched
// cooperatively) run the row pass after a grid-wide barrier (passes.cuh SoftmaxRows,
// AffineRows).
// The column-tile counters are the host's, zero between calls (torch_op.cuh).
// Specification: algebra.stage_forward("fused"), algebra.tile_rows.
#include "gemm.cuh"
#include "passes.cuh"

extern "C" const char* fl_fused_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const char* err;
  if (!p.training) {  // BN (running statistics), the scale and the bias in the GEMM's epilogue
    if ((err = launch_gemm<AffineStore>(p, p.x, p.w, p.y, st))) return err;
    return p.kind == 84 ? launch_online_softmax_rows(p.y, nullptr, p.y, p.n, p.m, nullptr, st) : nullptr;
  }
  bool rows_done = false;  // Z', partials, a, c; on the persistent wgmma GEMM the row pass too
  if (p.kind == 84) {
    if ((err = launch_gemm<ColumnStatsMerge, SoftmaxRows>(p, p.x, p.w, p.z, st, &rows_done))) return err;
    return rows_done ? nullptr : launch_online_softmax_rows(p.z, p.coef, p.y, p.n, p.m, p.num_batches_tracked, st);
  }
  if ((err = launch_gemm<ColumnStatsMerge, AffineRows>(p, p.x, p.w, p.z, st, &rows_done))) return err;
  return rows_done ? nullptr : launch_affine(p.z, p.coef, p.y, p.n, p.m, p.num_batches_tracked, st);
}
