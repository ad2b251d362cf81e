// Stage 4, fused: the GEMM's ColumnStatsMerge epilogue stores Z' = XWᵀ and its row tile's
// column partials, and the last tile of each column block (tile counter + fence) merges all
// row tiles in the merge order into a, c and the running buffers (the persistent tf32 GEMM:
// as units after its tiles, 64 columns each, gemm_wgmma.cuh). Then one row pass reads Z' once:
// V = a∘Z' + c and (84) the softmax from online (max, Σexp) partials, writing Y once.
// What changes from sums: the finalize kernel moves into the epilogue and the row softmax
// reads each row once (online). Eval mode: as sums (coefficients from the running buffers
// in the GEMM's AffineStore epilogue), then the online softmax (84). Two kernels a forward (one
// in eval mode at 33/39).
// The column-tile counters are the host's, zero between calls (torch_op.cuh). Data parallelism
// (p.sync_phase, common.cuh): phase 1 stops after the GEMM, whose merge wrote this rank's
// moments; phase 2 merges every rank's and runs the row pass.
// Specification: algebra.stage_forward("fused"), algebra.tile_rows.
#include "gemm.cuh"
#include "passes.cuh"

extern "C" const char* fl_fused_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const char* err;
  if (!p.training) {  // BN (running statistics), the scale and the bias in the GEMM's epilogue:
    // 33/39's Y itself (at p.z, in p.z_type: a 16-bit module's dtype), 84's softmax input (float32)
    if (p.kind != 84) return launch_gemm<AffineStore>(p, p.x, p.w, p.z, st);
    if ((err = launch_gemm<AffineStore>(p, p.x, p.w, p.y, st))) return err;
    return launch_online_softmax_rows(ZIn{p.y, OPERAND_FP32}, nullptr, y_out(p), p.n, p.m, nullptr, st);
  }
  if (p.sync_phase != 2) {
    if ((err = launch_gemm<ColumnStatsMerge>(p, p.x, p.w, p.z, st))) return err;  // Z', partials, a, c
    if (p.sync_phase == 1) return nullptr;  // (the epilogue's merge wrote this rank's moments)
  } else if ((err = launch_rank_merge(p, false, false, st))) {  // data parallelism: every rank's moments
    return err;
  }
  return p.kind == 84 ? launch_online_softmax_rows(z_in(p), p.coef, y_out(p), p.n, p.m, p.num_batches_tracked, st)
                      : launch_affine(z_in(p), p.coef, y_out(p), p.n, p.m, p.num_batches_tracked, st);
}
