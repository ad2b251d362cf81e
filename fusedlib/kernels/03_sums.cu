// Stage 3, sums: batch statistics come from the GEMM itself. The ColumnStats epilogue of
// each row tile writes Z' = XWᵀ (no bias: it cancels in train mode) and the tile's column
// partials (mean_t, M2_t); a finalize kernel merges them in the merge order (common.cuh) with Chan's formula
// into a, c and the running buffers; one row pass writes Y (84: with the row softmax).
// What changes from fold: the epilogue (the two column passes are gone).
// Data parallelism (p.sync_phase, common.cuh): phase 1 stops at this rank's moments, phase 2
// merges every rank's and runs the row pass.
// Eval mode: the GEMM's AffineStore epilogue computes the coefficients a, c from the
// running buffers (bias folded into c) and applies them, writing 33/39's Y (in a 16-bit
// module's dtype, rounded once), then the softmax (84).
// Specification: algebra.stage_forward("sums"), algebra.tile_rows.
#include "gemm.cuh"
#include "passes.cuh"

namespace fl {

// 64 columns a block, four threads a column (merge_columns, as the fused GEMM's merge units):
// merge the row-tile partials in the merge order, finalize a, c and the buffers.
__global__ void __launch_bounds__(256) sums_finalize_kernel(const Problem p, int tile_rows) {
  __shared__ float smem[3 * 256];
  const int j0 = blockIdx.x * 64;
  merge_columns(p, smem, j0, min(64, p.m - j0), tile_rows, threadIdx.x);
}

}  // namespace fl

extern "C" const char* fl_sums_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const char* err;
  if (!p.training) {  // BN (running statistics), the scale and the bias in the GEMM's epilogue:
    // 33/39's Y itself (at p.z, in p.z_type: a 16-bit module's dtype), 84's softmax input (float32)
    if (p.kind != 84) return launch_gemm<AffineStore>(p, p.x, p.w, p.z, st);
    if ((err = launch_gemm<AffineStore>(p, p.x, p.w, p.y, st))) return err;
    return launch_affine_softmax_rows(ZIn{p.y, OPERAND_FP32}, nullptr, y_out(p), p.n, p.m, nullptr, st);
  }
  if (p.sync_phase != 2) {
    if ((err = launch_gemm<ColumnStats>(p, p.x, p.w, p.z, st))) return err;  // Z', partials
    sums_finalize_kernel<<<ceil_div(p.m, 64), 256, 0, st>>>(p, gemm_tile_rows(p));  // (phase 1: the moments)
    FL_CHECK_LAUNCH();
    if (p.sync_phase == 1) return nullptr;
  } else if ((err = launch_rank_merge(p, false, false, st))) {  // data parallelism: every rank's moments
    return err;
  }
  return p.kind == 84 ? launch_affine_softmax_rows(z_in(p), p.coef, y_out(p), p.n, p.m, p.num_batches_tracked, st)
                      : launch_affine(z_in(p), p.coef, y_out(p), p.n, p.m, p.num_batches_tracked, st);
}
