// Stage 2, fold: the scale is folded into BatchNorm's per-column coefficients, so
// normalize + affine + scale is one pass V = a∘Z + c (84: inside the row softmax kernel).
// GEMM+bias → column mean → column variance → coefficients (+ running buffers) → one row pass.
// What changes from naive: the passes after the statistics (the GEMM and its bias-store
// epilogue are the same). Eval mode: coefficients from the running buffers. Data parallelism
// (p.sync_phase, common.cuh): phase 1 stops at this rank's moments, phase 2 merges every rank's.
// Specification: algebra.stage_forward("fold").
#include "gemm.cuh"
#include "passes.cuh"

namespace fl {

// One thread a column: a_j, c_j (train: from the batch stats of Z, which includes the bias;
// eval: from the running buffers), and in train mode the running-buffer update.
__global__ void fold_coefficients_kernel(const Problem p) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.m) return;
  if (p.training) {
    finalize_column(p, j, p.coef[2 * (size_t)p.m + j], p.coef[3 * (size_t)p.m + j], true, (float)p.n);
  } else {
    const Affine ac = eval_affine(p, j, false);
    p.coef[j] = ac.a;
    p.coef[(size_t)p.m + j] = ac.c;
  }
}

}  // namespace fl

extern "C" const char* fl_fold_forward(const fl::Problem* pp, cudaStream_t st) {
  using namespace fl;
  const Problem& p = *pp;
  const char* err;
  float *mean = p.coef + 2 * (size_t)p.m, *var = p.coef + 3 * (size_t)p.m;
  if (p.sync_phase != 2) {
    if ((err = launch_gemm<BiasStore>(p, p.x, p.w, p.z, st))) return err;  // Z = XWᵀ + b
    if (p.training && (err = launch_column_stats(p.z, mean, var, p.n, p.m, st))) return err;
    if (p.sync_phase == 1) return launch_local_moments(p, mean, var, st);  // data parallelism: this rank's
  }
  if (p.sync_phase == 2) {
    if ((err = launch_rank_merge(p, false, true, st))) return err;  // every rank's moments merged
  } else {
    fold_coefficients_kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p);
    FL_CHECK_LAUNCH();
  }
  long long* step = p.training ? p.num_batches_tracked : nullptr;
  return p.kind == 84 ? launch_affine_softmax_rows(z_in(p), p.coef, y_out(p), p.n, p.m, step, st)
                      : launch_affine(z_in(p), p.coef, y_out(p), p.n, p.m, step, st);
}
