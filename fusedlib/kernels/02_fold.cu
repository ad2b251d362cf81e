// Stage 2, fold: the scale is folded into BatchNorm's per-column coefficients, so
// normalize + affine + scale is one pass V = a∘Z + c (84: inside the row softmax kernel).
// GEMM+bias → column mean → column variance → coefficients (+ running buffers) → one row pass.
// What changes from naive: the passes after the statistics (the GEMM and its bias-store
// epilogue are the same). Eval mode: coefficients from the running buffers.
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
    finalize_column(p, j, p.coef[2 * (size_t)p.m + j], p.coef[3 * (size_t)p.m + j], true);
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
  const char* err = launch_gemm<BiasStore>(p, p.x, p.w, p.z, st);  // Z = XWᵀ + b
  if (err) return err;
  if (p.training &&
      (err = launch_column_stats(p.z, p.coef + 2 * (size_t)p.m, p.coef + 3 * (size_t)p.m, p.n, p.m, st)))
    return err;
  fold_coefficients_kernel<<<ceil_div(p.m, 256), 256, 0, st>>>(p);
  FL_CHECK_LAUNCH();
  long long* step = p.training ? p.num_batches_tracked : nullptr;
  return p.kind == 84 ? launch_affine_softmax_rows(p.z, p.coef, p.y, p.n, p.m, step, st)
                      : launch_affine(p.z, p.coef, p.y, p.n, p.m, step, st);
}
