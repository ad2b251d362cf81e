// The host side of the PyTorch operator torch.ops.fusedlib.<stage> on CUDA tensors
// (fusedlib/ops.py defines the schema, the CPU kernel, the fake and the autograd kernel).
// Compiled after one stage file (fusedlib/build.py), which defines fl_<FL_STAGE>_forward:
// argument checks, the GEMM path (engine.select_path's default rule), the output Y (whose
// memory also holds Z: the passes work in place; z_out, when the backward needs Z, keeps
// it instead), the stream's scratch, the launches on the
// current CUDA stream ($FUSEDLIB_POISON=1: Y and the scratch filled with NaN first, for the
// correctness tests). The heavy launch, the GEMM, is the first; nothing here waits for the
// GPU, so a forward can be captured in a CUDA graph. Host cost of an eager call: one
// allocation and the stage's launches (two for fused). The same function is registered for
// the CUDA dispatch key and exported to Python (`forward`) for the modules' eager calls,
// which skip the dispatcher.
#pragma once
#include "torch_common.cuh"

#define FL_CAT2(a, b) a##b
#define FL_CAT(a, b) FL_CAT2(a, b)
#define FL_STR2(a) #a
#define FL_STR(a) FL_STR2(a)
#define FL_ENTRY FL_CAT(FL_CAT(fl_, FL_STAGE), _forward)

namespace fl {

// Compute capability of a device, 10·major + minor (asked once per device).
inline int capability(int device) {
  static int cached[64] = {0};
  if (device < 64 && cached[device]) return cached[device];
  int major = 0, minor = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (device < 64) cached[device] = 10 * major + minor;
  return 10 * major + minor;
}

// engine.select_path's default rule (without the FUSEDLIB_GEMM_PATH switch, which the
// Python side resolves): fp32 on SIMT, tf32/3xtf32 on wgmma on sm_90 when TMA can address
// the operands, else mma.sync from sm_80 on.
inline int default_path(int precision, const at::Tensor& x, const at::Tensor& w) {
  if (precision == FP32) return PATH_SIMT;
  const int cc = capability(x.get_device());
  TORCH_CHECK(cc >= 80, "precision: tf32/3xtf32 need TF32 tensor cores (compute capability 8.0 or later); "
              "this GPU has " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ": use precision='fp32'");
  const bool tma_ok = x.size(1) % 4 == 0 && (uintptr_t)x.data_ptr() % 16 == 0 && (uintptr_t)w.data_ptr() % 16 == 0;
  return cc == 90 && tma_ok ? PATH_WGMMA : PATH_MMA;
}

inline int parse_path(std::optional<c10::string_view> gemm_path, int precision, const at::Tensor& x,
                      const at::Tensor& w) {
  if (!gemm_path) return default_path(precision, x, w);
  if (*gemm_path == "simt") return PATH_SIMT;
  if (*gemm_path == "mma") return PATH_MMA;
  if (*gemm_path == "wgmma") return PATH_WGMMA;
  TORCH_CHECK(false, "gemm_path: expected 'simt', 'mma', 'wgmma' or None, got '", std::string(*gemm_path), "'");
}

}  // namespace fl

// torch.ops.fusedlib.<stage> on CUDA: see fusedlib/ops.py for the schema and its meaning.
at::Tensor forward(const at::Tensor& x_in, const at::Tensor& weight_in, const at::Tensor& bias,
                   const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
                   at::Tensor& running_mean, at::Tensor& running_var, at::Tensor& num_batches_tracked,
                   c10::string_view kind, c10::string_view precision, bool training, double eps,
                   std::optional<double> momentum, std::optional<c10::string_view> gemm_path,
                   const std::optional<at::Tensor>& weight_split, const std::optional<at::Tensor>& z_out) {
  using namespace fl;
  TORCH_CHECK(x_in.is_cuda(), "x: expected a CUDA tensor, got one on ", x_in.device());
  TORCH_CHECK(x_in.scalar_type() == at::kFloat, "x: the CUDA kernels take float32, got ", x_in.scalar_type());
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(0) > 0, "x: expected a non-empty 2-D tensor (batch, in_features), got shape ",
              shape_str(x_in));
  TORCH_CHECK(weight_in.device() == x_in.device() && weight_in.scalar_type() == at::kFloat && weight_in.dim() == 2 &&
              weight_in.size(1) == x_in.size(1),
              "weight: expected a float32 (out_features, " + std::to_string(x_in.size(1)) + ") tensor on ",
              x_in.device(), ", got ", weight_in.scalar_type(), " ", shape_str(weight_in), " on ", weight_in.device());
  TORCH_CHECK(!training || x_in.size(0) > 1, "Expected more than 1 value per channel when training, got input size ",
              shape_str(x_in), " (x: BatchNorm in train mode needs a batch of at least 2)");
  TORCH_CHECK(kind == "84" || kind == "33", "kind: expected '84' or '33', got '", std::string(kind), "'");
  const int prec = precision == "fp32" ? FP32 : precision == "tf32" ? TF32 : precision == "3xtf32" ? TF32X3 : -1;
  TORCH_CHECK(prec >= 0, "precision: expected 'fp32', 'tf32' or '3xtf32', got '", std::string(precision), "'");
  const at::Tensor x = x_in.contiguous(), w = weight_in.contiguous();
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  TORCH_CHECK(n * std::max(k, m) < INT32_MAX, "x, weight: sizes beyond 32-bit indexing are not supported");
  check_vector(bias, "bias", m, x);
  check_vector(gamma, "gamma", m, x);
  check_vector(beta, "beta", m, x);
  check_vector(running_mean, "running_mean", m, x);
  check_vector(running_var, "running_var", m, x);
  TORCH_CHECK(scale.device() == x.device() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
              (scale.numel() == 1 || (kind == "33" && scale.numel() == m)),
              "scale: expected a contiguous float32 tensor on ", x.device(), " with 1 element",
              kind == "33" ? " or out_features" : "", ", got ", scale.scalar_type(), " ", shape_str(scale));
  TORCH_CHECK(num_batches_tracked.device() == x.device() && num_batches_tracked.scalar_type() == at::kLong &&
              num_batches_tracked.numel() == 1,
              "num_batches_tracked: expected an int64 scalar tensor on ", x.device());

  const c10::cuda::CUDAGuard guard(x.device());
  const int path = parse_path(gemm_path, prec, x, w);
  const bool split = path == PATH_WGMMA && prec == TF32X3;
  const bool split_w = split && !(weight_split && weight_split->defined());
  if (split && !split_w)
    TORCH_CHECK(weight_split->device() == x.device() && weight_split->scalar_type() == at::kFloat &&
                weight_split->is_contiguous() && weight_split->numel() == 2 * m * k,
                "weight_split: expected a contiguous float32 (2, " + std::to_string(m) + ", " + std::to_string(k) +
                    ") tensor on ",
                x.device());

  const bool keep_z = z_out && z_out->defined();
  if (keep_z)
    TORCH_CHECK(training && z_out->device() == x.device() && z_out->scalar_type() == at::kFloat &&
                    z_out->is_contiguous() && z_out->dim() == 2 && z_out->size(0) == n && z_out->size(1) == m,
                "z_out: expected a contiguous float32 (" + std::to_string(n) + ", " + std::to_string(m) +
                    ") tensor on ",
                x.device(), " in train mode, got ", z_out->scalar_type(), " ", shape_str(*z_out),
                training ? "" : " in eval mode");

  // Y, whose memory holds Z until the last pass overwrites it (unless z_out keeps Z); the stream's scratch:
  // counters, tile partials (the smallest statistics tile is 32 rows; naive keeps its row
  // max and Σexp there), coefficients (4, M), split-K partial tiles, z₀ (M); for 3xTF32 on wgmma X's and (unless cached
  // by the caller) W's TF32 parts, in a workspace of this call.
  at::Tensor y = at::empty({n, m}, x.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  const int64_t tiles = (n + 31) / 32, n_part = aligned_floats(std::max(2 * tiles * m, 2 * n));
  // wgmma: split-K where the tiles would leave most SMs idle (its partial tiles and counters)
  const WgSplitK sk = path == PATH_WGMMA ? wg_split_k(prec, (int)n, (int)k, (int)m) : WgSplitK{1, 0, 0};
  // train mode at fp32 and 3xTF32: the first-row shift's z₀ (common.cuh column_shift; tf32 reads X as it is)
  const bool shift = training && prec != TF32;
  const int64_t n_count = aligned_floats((m + 31) / 32), n_sk = aligned_floats((int64_t)sk.floats());
  const int64_t n_floats = n_part + 4 * m + n_sk + (shift ? m : 0);
  at::Tensor captured, split_ws;
  const Scratch scratch = stream_scratch(x, stream, n_count + (sk.splits > 1 ? sk.tiles : 0), n_floats, captured);
  if (split) split_ws = at::empty({2 * n * k + (split_w ? 2 * m * k : 0)}, x.options());

  Problem p;
  p.x = x.data_ptr<float>();
  p.w = w.data_ptr<float>();
  p.bias = bias.data_ptr<float>();
  p.scale = scale.data_ptr<float>();
  p.gamma = gamma.data_ptr<float>();
  p.beta = beta.data_ptr<float>();
  p.running_mean = running_mean.data_ptr<float>();
  p.running_var = running_var.data_ptr<float>();
  p.num_batches_tracked = reinterpret_cast<long long*>(num_batches_tracked.data_ptr<int64_t>());
  p.y = y.data_ptr<float>();
  p.z = keep_z ? z_out->data_ptr<float>() : p.y;
  p.part = scratch.floats;
  p.coef = scratch.floats + n_part;
  p.counters = scratch.counters;
  p.xsplit = split ? split_ws.data_ptr<float>() : nullptr;
  p.wsplit = !split ? nullptr : split_w ? p.xsplit + 2 * n * k : weight_split->data_ptr<float>();
  p.split_w = split_w;
  p.splitk = sk.splits > 1 ? scratch.floats + n_part + 4 * m : nullptr;
  p.splitk_counters = sk.splits > 1 ? scratch.counters + n_count : nullptr;
  p.splits = sk.splits;
  p.z0 = shift ? scratch.floats + n_part + 4 * m + n_sk : nullptr;
  p.n = (int)n;
  p.k = (int)k;
  p.m = (int)m;
  p.kind = kind == "84" ? 84 : 33;
  p.training = training;
  p.precision = prec;
  p.scale_len = (int)scale.numel();
  p.path = path;
  p.eps = (float)eps;
  p.momentum = momentum ? (float)*momentum : 0.f;
  p.momentum_none = !momentum;

  const char* poison = std::getenv("FUSEDLIB_POISON");
  if (poison && poison[0] == '1') {  // correctness tests: every unwritten element reads NaN (0xFFFFFFFF)
    C10_CUDA_CHECK(cudaMemsetAsync(scratch.floats, 0xFF, n_floats * sizeof(float), stream));
    C10_CUDA_CHECK(cudaMemsetAsync(p.y, 0xFF, y.nbytes(), stream));
    if (keep_z) C10_CUDA_CHECK(cudaMemsetAsync(p.z, 0xFF, y.nbytes(), stream));
    if (split) C10_CUDA_CHECK(cudaMemsetAsync(p.xsplit, 0xFF, split_ws.nbytes(), stream));
  }
  const char* err = FL_ENTRY(&p, stream);
  TORCH_CHECK(err == nullptr, "fusedlib " FL_STR(FL_STAGE) " kernels: ", err ? err : "");
  if (training)
    for (at::Tensor* t : {&running_mean, &running_var, &num_batches_tracked})  // the schema's (a!), (b!), (c!)
      if (!t->is_inference()) t->unsafeGetTensorImpl()->bump_version();
  if (keep_z && !z_out->is_inference()) z_out->unsafeGetTensorImpl()->bump_version();  // (d!)
  return y;
}

TORCH_LIBRARY_IMPL(fusedlib, CUDA, m) { m.impl(FL_STR(FL_STAGE), &forward); }
