// The host side of the PyTorch operator torch.ops.fusedlib.<stage> on CUDA tensors
// (fusedlib/ops.py defines the schema, the CPU kernel, the fake and the autograd kernel).
// Compiled after one stage file (fusedlib/build.py), which defines fl_<FL_STAGE>_forward:
// argument checks, the GEMM path (engine.select_path's default rule), the output Y (whose
// memory also holds Z: the passes work in place; z_out, when the backward needs Z, keeps
// it instead; a 16-bit module's Z' at sums and fused is in its dtype, kStageZ16), the stream's
// scratch, the launches on the
// current CUDA stream ($FUSEDLIB_POISON=1: Y and the scratch filled with NaN first, for the
// correctness tests). The heavy launch, the GEMM, is the first; nothing here waits for the
// GPU, so a forward can be captured in a CUDA graph. Host cost of an eager call: one
// allocation and the stage's launches (two for fused). The function is registered for the
// CUDA dispatch key; the modules' eager calls reach it without the dispatcher and without
// pybind11's argument casts (eager_forward, the extension's one Python function).
#pragma once
#include "torch_common.cuh"

#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <climits>
#include <string_view>

#define FL_CAT2(a, b) a##b
#define FL_CAT(a, b) FL_CAT2(a, b)
#define FL_STR2(a) #a
#define FL_STR(a) FL_STR2(a)
#define FL_ENTRY FL_CAT(FL_CAT(fl_, FL_STAGE), _forward)

namespace fl {

// Whether this stage keeps a 16-bit module's Z' in the module's dtype in train mode (docs/design.md
// §15): sums and fused, whose GEMM epilogue stores Z' (ColumnStats: rounded once, after the
// statistics took the float32 values, as eager PyTorch's Linear rounds its output) and whose row
// pass and backward read it. naive and fold keep Z in float32 (fusedlib.algebra.Z16_STAGES).
// In eval mode the same two stages' GEMM epilogue (AffineStore) writes 33/39's Y, in the module's
// dtype where Y has it (rounded once from float32, as a pass after it would).
#define FL_Z16_naive false
#define FL_Z16_fold false
#define FL_Z16_sums true
#define FL_Z16_fused true
constexpr bool kStageZ16 = FL_CAT(FL_Z16_, FL_STAGE);

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
// Python side resolves): fp32 on SIMT, tf32/3xtf32 and 16-bit operands on wgmma on sm_90 when
// TMA can address the operands, else mma.sync from sm_80 on (the caller has checked that the
// GPU has tensor cores). -1: an unknown gemm_path.
inline int parse_path(std::optional<c10::string_view> gemm_path, int precision, const at::Tensor& x,
                      const at::Tensor& w) {
  if (gemm_path) return *gemm_path == "simt" ? PATH_SIMT : *gemm_path == "mma" ? PATH_MMA
                        : *gemm_path == "wgmma" ? PATH_WGMMA : -1;
  if (precision == FP32) return PATH_SIMT;
  const bool tma_ok = x.size(1) * x.element_size() % 16 == 0 && (uintptr_t)x.data_ptr() % 16 == 0 &&
                      (uintptr_t)w.data_ptr() % 16 == 0;
  return capability(x.get_device()) == 90 && tma_ok ? PATH_WGMMA : PATH_MMA;
}

// A check of the forward's arguments (in forward_impl): raises the message, or in an eager
// call returns std::nullopt, so that the module falls back to the operator, whose errors come
// after Python's own checks and name the argument (fusedlib.modules.validate_input).
#define FL_ARG_CHECK(cond, ...)                 \
  do {                                          \
    if (!(cond)) {                              \
      if (eager) return std::nullopt;           \
      TORCH_CHECK(false, __VA_ARGS__);          \
    }                                           \
  } while (0)

// Whether a forward shifts its GEMM by the batch's first row: train mode at fp32 and 3xTF32
// (common.cuh column_shift, algebra.train_gemm; tf32 reads X as it is).
inline bool first_row_shift(c10::string_view precision, bool training) { return training && precision != "tf32"; }

// Data parallelism (docs/design.md §14): what a phase of a train-mode forward split around its
// collective takes besides the operator's arguments (sync_train, below).
struct SyncArgs {
  int phase;           // 1: up to this rank's column moments; 2: from every rank's (Problem::sync_phase)
  at::Tensor y;        // (N, M) Y, the caller's, the same in both phases
  at::Tensor moments;  // phase 1: (4, M) the message; phase 2: (R, 4, M) every rank's, in rank order
  at::Tensor stats;    // phase 2: (2, M) the global batch's mean and biased variance of Z
  at::Tensor x0;       // ranks ≠ 0 under the first-row shift: rank 0's first row (K), this GEMM's x₀, external
                       //        (Problem::x0, x0_external); undefined: x's own row 0
};

}  // namespace fl

// torch.ops.fusedlib.<stage> on CUDA (forward, below) and the modules' eager call
// (eager_forward): see fusedlib/ops.py for the schema and its meaning. With eager = true a
// failed check returns std::nullopt instead of raising (FL_ARG_CHECK).
static std::optional<at::Tensor> forward_impl(
    const at::Tensor& x_in, const at::Tensor& weight_in, const at::Tensor& bias_in, const at::Tensor& scale_in,
    const at::Tensor& gamma_in, const at::Tensor& beta_in, at::Tensor& running_mean_in, at::Tensor& running_var_in,
    at::Tensor& num_batches_tracked, c10::string_view kind, c10::string_view precision, bool training, double eps,
    std::optional<double> momentum, std::optional<c10::string_view> gemm_path, const std::optional<at::Tensor>& z_out,
    bool eager, const fl::SyncArgs* sync = nullptr) {
  using namespace fl;
  FL_ARG_CHECK(x_in.is_cuda(), "x: expected a CUDA tensor, got one on ", x_in.device());
  // X's and W's element type: float32, or bf16 / fp16 (docs/design.md §15: the GEMM on 16-bit tensor
  // cores, everything after it in float32 as for float32 operands, Z' at sums and fused excepted:
  // kStageZ16; the vectors stay float32)
  const int operand = x_in.scalar_type() == at::kFloat      ? OPERAND_FP32
                      : x_in.scalar_type() == at::kBFloat16 ? OPERAND_BF16
                      : x_in.scalar_type() == at::kHalf     ? OPERAND_FP16
                                                            : -1;
  FL_ARG_CHECK(operand >= 0, "x: the CUDA kernels take float32, bfloat16 or float16, got ", x_in.scalar_type());
  FL_ARG_CHECK(x_in.dim() == 2 && x_in.size(0) > 0,
               "x: expected a non-empty 2-D tensor (batch, in_features), got shape ", shape_str(x_in));
  FL_ARG_CHECK(weight_in.device() == x_in.device() && weight_in.scalar_type() == x_in.scalar_type() &&
                   weight_in.dim() == 2 && weight_in.size(1) == x_in.size(1),
               "weight: expected a ", c10::toString(x_in.scalar_type()), " (out_features, " + std::to_string(x_in.size(1)) +
                   ") tensor (x's dtype) on ",
               x_in.device(), ", got ", weight_in.scalar_type(), " ", shape_str(weight_in), " on ", weight_in.device());
  FL_ARG_CHECK(!training || sync || x_in.size(0) > 1,  // (data parallelism: the global batch, checked by the caller)
               "Expected more than 1 value per channel when training, got input size ",
               shape_str(x_in), " (x: BatchNorm in train mode needs a batch of at least 2)");
  FL_ARG_CHECK(kind == "84" || kind == "33", "kind: expected '84' or '33', got '", std::string(kind), "'");
  const int named = precision == "fp32" ? FP32 : precision == "tf32" ? TF32 : precision == "3xtf32" ? TF32X3 : -1;
  FL_ARG_CHECK(named >= 0, "precision: expected 'fp32', 'tf32' or '3xtf32', got '", std::string(precision), "'");
  // 16-bit operands: every precision multiplies them exactly; they run the tf32 kernels' tiles
  const bool sixteen = operand != OPERAND_FP32;
  const int prec = sixteen ? TF32 : named;
  const int64_t n = x_in.size(0), k = x_in.size(1), m = weight_in.size(0);
  FL_ARG_CHECK(dims_fit({n, k, m}), "x, weight: batch, in_features and out_features must each be ", dims_limit(),
               ", got x ", shape_str(x_in), " and weight ", shape_str(weight_in));
  // bf16/fp16 vectors (a module .to(dtype), docs/design.md §15): the kernels read each vector in x's
  // 16-bit dtype where it lies, at its stride, widened where read (common.cuh Vec), the kernel that
  // updates the running buffers writes them in their dtype, and Y is returned in x's dtype promoted
  // with the scale's (the fake's dtype). Nothing is copied or kept between calls.
  const at::Tensor* in[6] = {&bias_in, &scale_in, &gamma_in, &beta_in, &running_mean_in, &running_var_in};
  bool in16[6];
  for (int i = 0; i < 6; ++i)
    in16[i] = operand != OPERAND_FP32 && in[i]->scalar_type() == x_in.scalar_type() && in[i]->dim() == 1 &&
              in[i]->device() == x_in.device();
  const char* names[6] = {"bias", "scale", "gamma", "beta", "running_mean", "running_var"};
  for (int i : {0, 2, 3, 4, 5}) {
    if (in16[i]) {  // a vector in x's 16-bit dtype, read where it lies, needs only its length (a stride of an int)
      if (eager && (in[i]->size(0) != m || in[i]->stride(0) > INT_MAX)) return std::nullopt;
      FL_ARG_CHECK(in[i]->size(0) == m, names[i], ": expected shape (", m, ",), got ", shape_str(*in[i]));
      FL_ARG_CHECK(in[i]->stride(0) <= INT_MAX, names[i], ": expected a stride of at most ", INT_MAX, ", got ",
                   in[i]->stride(0));
      continue;
    }
    if (eager && !is_vector(*in[i], m, x_in)) return std::nullopt;
    check_vector(*in[i], names[i], m, x_in);
  }
  const at::Tensor& scale = scale_in;
  FL_ARG_CHECK(scale.device() == x_in.device() && (in16[1] || (scale.scalar_type() == at::kFloat && scale.is_contiguous())) &&
                   (scale.numel() == 1 || (kind == "33" && scale.numel() == m)),
               "scale: expected a contiguous float32 tensor on ", x_in.device(), " with 1 element",
               kind == "33" ? " or out_features" : "", ", got ", scale.scalar_type(), " ", shape_str(scale));
  FL_ARG_CHECK(num_batches_tracked.device() == x_in.device() && num_batches_tracked.scalar_type() == at::kLong &&
                   num_batches_tracked.numel() == 1,
               "num_batches_tracked: expected an int64 scalar tensor on ", x_in.device());
  const int cc = capability(x_in.get_device());
  FL_ARG_CHECK(prec == FP32 || cc >= 80 || sixteen,
               "precision: tf32/3xtf32 need TF32 tensor cores (compute capability 8.0 or later); this GPU has " +
                   std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ": use precision='fp32'");
  FL_ARG_CHECK(!sixteen || (cc >= 80 && k % 8 == 0),
               "x, weight: bf16/fp16 operands need bf16/fp16 tensor cores (compute capability 8.0 or later, this GPU "
               "has " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ") and in_features % 8 == 0 (got " +
                   std::to_string(k) + "); fusedlib's modules convert such operands to float32 instead");
  const bool keep_z = z_out && z_out->defined();
  // Z' in x's 16-bit dtype (kStageZ16), else Z in float32; z_out, where given, holds it so
  const bool z16 = kStageZ16 && sixteen && training && !sync;
  const at::ScalarType z_dtype = z16 ? x_in.scalar_type() : at::kFloat;
  if (keep_z)
    FL_ARG_CHECK(training && z_out->device() == x_in.device() && z_out->scalar_type() == z_dtype &&
                    z_out->is_contiguous() && z_out->dim() == 2 && z_out->size(0) == n && z_out->size(1) == m,
                 "z_out: expected a contiguous ", c10::toString(z_dtype), " (" + std::to_string(n) + ", " +
                     std::to_string(m) + ") tensor on ",
                 x_in.device(), " in train mode, got ", z_out->scalar_type(), " ", shape_str(*z_out),
                 training ? "" : " in eval mode");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x_in.get_device()).stream();
  const bool capturing = is_capturing(stream);
  // 16-bit operands load in 16-byte copies (TMA, cp.async): a view starting elsewhere is copied
  // (its own allocation is aligned); fp32 words have a path for any address
  const auto aligned16 = [&](const at::Tensor& t) {
    return sixteen && (uintptr_t)t.data_ptr() % 16 != 0 ? t.clone(at::MemoryFormat::Contiguous) : t.contiguous();
  };
  const at::Tensor x = aligned16(x_in), w = aligned16(weight_in);
  const int path = parse_path(gemm_path, prec, x, w);
  FL_ARG_CHECK(path >= 0, "gemm_path: expected 'simt', 'mma', 'wgmma' or None, got '", std::string(*gemm_path), "'");
  FL_ARG_CHECK(!sixteen || path != PATH_SIMT, "gemm_path: bf16/fp16 operands run on 'mma' or 'wgmma', not 'simt'");

  // Y, whose memory holds Z until the last pass overwrites it (unless z_out keeps Z); the stream's scratch:
  // counters, tile partials (the smallest statistics tile is 32 rows; naive keeps its row
  // max and Σexp there), coefficients (4, M), split-K partial tiles, z₀ (M). Nothing derived
  // from the parameters is kept between calls (3xTF32 splits W inside the GEMM).
  // Sizes in int64 (N·M, the partials' 2·⌈N/32⌉·M, pass 2³¹ at 65537 × 32768); where the GPU cannot
  // hold Y or the scratch, torch.OutOfMemoryError says what this forward needs (explain_oom).
  const int64_t tiles = (n + 31) / 32, n_part = aligned_floats(std::max(2 * tiles * m, 2 * n));
  // 3xTF32 on wgmma: W's parts (2, M, K) with many row tiles (gemm_wgmma.cuh wg_w_pass), or X's (2, N, K)
  // for the swapped GEMM (wg_swap), made at this call; parts_rows: M, N or 0 (none)
  const bool tf32x3_wgmma = path == PATH_WGMMA && prec == TF32X3 && n > 0 && m > 0 && k > 0 &&
                            (!sync || sync->phase == 1);  // (phase 2 runs no GEMM)
  const bool x_parts = tf32x3_wgmma && wg_swap((int)n, (int)m);
  const int64_t parts_rows = x_parts ? n : tf32x3_wgmma && wg_w_pass((int)n) ? m : 0;
  // Y in x's 16-bit dtype where that is Y's dtype (a module .to(dtype); not across a process group):
  // the stage's last pass writes it (common.cuh y_out), float32 Y its working memory
  const at::ScalarType out = at::promote_types(x_in.scalar_type(), scale_in.scalar_type());
  const bool y16_out = sixteen && !sync && out == x_in.scalar_type();
  // a 16-bit Z' not kept for the backward: in Y's 16-bit memory (the row pass runs in place there),
  // or (a float32 Y: autocast's scale promotes it) in memory of its own; the float32 working Y
  // then only where Y is float32
  // eval mode, 33/39 (sums, fused): the GEMM's epilogue writes the 16-bit Y itself, no float32 Y
  const bool y16_gemm = kStageZ16 && y16_out && !training && kind == "33";
  const bool z16_own = z16 && !keep_z && !y16_out, y32 = !(z16 && y16_out) && !y16_gemm;
  const auto needs = [&] {
    const int64_t y_bytes = y32 ? n * m * (int64_t)sizeof(float) : 0,
                  scratch_bytes = (n_part + 5 * m) * (int64_t)sizeof(float);
    const int64_t parts_bytes = 2 * parts_rows * k * (int64_t)sizeof(float);
    std::string msg = "x, weight: this forward needs " + mib(y_bytes + scratch_bytes + parts_bytes) +
                      " of GPU memory: " + mib(y_bytes) + " for Y " + float32_shape(n, m) + " and " +
                      mib(scratch_bytes) + " of scratch";
    if (parts_rows)
      msg += ", and " + mib(parts_bytes) + " for " + (x_parts ? "X" : "W") + "'s TF32 parts (2 x " +
             float32_shape(parts_rows, k) + ")";
    if (y16_out) msg += ", and " + mib(n * m * 2) + " for Y in " + std::string(c10::toString(out));
    if (z16_own) msg += ", and " + mib(n * m * 2) + " for Z' in " + std::string(c10::toString(z_dtype));
    if (keep_z && z16)
      msg += ", beside the " + mib(n * m * 2) + " of Z' in " + std::string(c10::toString(z_dtype)) +
             " kept for the backward (whose dZ' then needs as much again)";
    else if (keep_z)
      msg += ", beside the " + mib(n * m * 4) + " of Z " + float32_shape(n, m) + " kept for the backward (whose dZ' " +
             "and its transpose then need " + mib((prec == TF32X3 ? 4 : 2) * n * m * 4) + " more)";
    return msg;
  };
  at::Tensor y = sync ? sync->y
                      : at::Tensor(explain_oom(  // no dispatcher
                            [&] {
                              return at::detail::empty_cuda({y32 ? n : 0, m}, at::kFloat, x.device(), std::nullopt);
                            },
                            needs));
  // split-K where the tiles would leave SMs idle (its partial tiles and counters): wgmma, SIMT
  const SplitK sk = path == PATH_WGMMA  ? wg_split_k(prec, (int)n, (int)k, (int)m, operand)
                    : path == PATH_SIMT ? simt_split_k((int)n, (int)k, (int)m)
                                        : SplitK{1, 0, 0};
  const bool shift = !sixteen && first_row_shift(precision, training);  // (its z₀ in the scratch)
  const int64_t n_count = aligned_floats((m + 31) / 32), n_sk = aligned_floats((int64_t)sk.floats());
  const int64_t n_floats = n_part + 4 * m + n_sk + (shift ? m : 0);
  at::Tensor captured;
  const int64_t n_counters = n_count + (sk.splits > 1 ? sk.tiles : 0) + 1;
  const Scratch scratch =
      explain_oom([&] { return stream_scratch(x, stream, capturing, n_counters, n_floats, captured); }, needs);

  Problem p;
  p.x = static_cast<const float*>(x.data_ptr());  // (16-bit operands: their elements' address)
  p.w = static_cast<const float*>(w.data_ptr());
  // the vectors where they lie: a 16-bit one in its dtype at its stride, a float32 one contiguous
  Vec vec[6];
  for (int i = 0; i < 6; ++i)
    vec[i] = in16[i] ? Vec{in[i]->data_ptr(), (int)in[i]->stride(0), operand}
                     : vec_f32(static_cast<float*>(in[i]->data_ptr()));
  p.bias = vec[0];
  p.scale = vec[1];
  p.gamma = vec[2];
  p.beta = vec[3];
  p.running_mean = vec[4];
  p.running_var = vec[5];
  p.num_batches_tracked = reinterpret_cast<long long*>(num_batches_tracked.data_ptr<int64_t>());
  p.y = y.data_ptr<float>();
  at::Tensor y16;
  if (y16_out)
    y16 = explain_oom([&] { return at::detail::empty_cuda({n, m}, out, x.device(), std::nullopt); }, needs);
  p.y16 = y16.defined() ? static_cast<float*>(y16.data_ptr()) : nullptr;
  at::Tensor z_own;  // (z16_own: freed after the call, as parts below)
  if (z16_own)
    z_own = explain_oom([&] { return at::detail::empty_cuda({n, m}, z_dtype, x.device(), std::nullopt); }, needs);
  p.z = keep_z    ? static_cast<float*>(z_out->data_ptr())
        : z16_own ? static_cast<float*>(z_own.data_ptr())
        : z16 || y16_gemm ? p.y16
                          : p.y;
  p.z_type = z16 || y16_gemm ? operand : OPERAND_FP32;
  p.part = scratch.floats;
  p.coef = scratch.floats + n_part;
  p.counters = scratch.counters;
  p.splitk = sk.splits > 1 ? scratch.floats + n_part + 4 * m : nullptr;
  p.splitk_counters = sk.splits > 1 ? scratch.counters + n_count : nullptr;
  p.tile_counter = scratch.counters + n_count + (sk.splits > 1 ? sk.tiles : 0);
  p.splits = sk.splits;
  p.z0 = shift ? scratch.floats + n_part + 4 * m + n_sk : nullptr;
  p.x0_external = sync && sync->x0.defined();  // (data parallelism, ranks ≠ 0: rank 0's row)
  p.x0 = p.x0_external ? sync->x0.data_ptr<float>() : p.x;
  at::Tensor parts;  // freed after the call (the caching allocator's; a capture's pool keeps it for replays)
  if (parts_rows)
    parts = explain_oom(
        [&] { return at::detail::empty_cuda({2 * parts_rows * k}, at::kFloat, x.device(), std::nullopt); }, needs);
  p.parts = parts_rows ? parts.data_ptr<float>() : nullptr;
  p.n = (int)n;
  p.k = (int)k;
  p.m = (int)m;
  p.kind = kind == "84" ? 84 : 33;
  p.training = training;
  p.precision = prec;
  p.operand = operand;
  p.scale_len = (int)scale.numel();
  p.path = path;
  p.eps = (float)eps;
  p.momentum = momentum ? (float)*momentum : 0.f;
  p.momentum_none = !momentum;
  p.sync_phase = sync ? sync->phase : 0;
  p.moments = sync && sync->phase == 1 ? sync->moments.data_ptr<float>() : nullptr;
  p.gathered = sync && sync->phase == 2 ? sync->moments.data_ptr<float>() : nullptr;
  p.stats = sync && sync->phase == 2 ? sync->stats.data_ptr<float>() : nullptr;
  p.ranks = sync && sync->phase == 2 ? (int)sync->moments.size(0) : 0;
  if (sync && shift)  // z₀ into the message (phase 1: rank 0's; an external x₀ writes none); rank 0's, the same
    p.z0 = (sync->phase == 1 ? p.moments : const_cast<float*>(p.gathered)) + 3 * m;  // on every rank (phase 2)

  const char* poison = std::getenv("FUSEDLIB_POISON");
  if (poison && poison[0] == '1') {  // correctness tests: every unwritten element reads NaN (0xFFFFFFFF)
    C10_CUDA_CHECK(cudaMemsetAsync(scratch.floats, 0xFF, n_floats * sizeof(float), stream));
    if (y32) C10_CUDA_CHECK(cudaMemsetAsync(p.y, 0xFF, y.nbytes(), stream));
    if (p.y16) C10_CUDA_CHECK(cudaMemsetAsync(p.y16, 0xFF, y16.nbytes(), stream));
    if (z16_own) C10_CUDA_CHECK(cudaMemsetAsync(p.z, 0xFF, z_own.nbytes(), stream));
    if (keep_z && p.sync_phase != 2)  // (2: Z is phase 1's)
      C10_CUDA_CHECK(cudaMemsetAsync(p.z, 0xFF, z_out->nbytes(), stream));
  }
  const char* err = FL_ENTRY(&p, stream);
  TORCH_CHECK(err == nullptr, "fusedlib " FL_STR(FL_STAGE) " kernels: ", err ? err : "");
  if (training) {
    for (at::Tensor* t : {&running_mean_in, &running_var_in, &num_batches_tracked})  // the schema's (a!), (b!), (c!)
      if (!t->is_inference()) t->unsafeGetTensorImpl()->bump_version();
  }
  if (keep_z && !z_out->is_inference()) z_out->unsafeGetTensorImpl()->bump_version();  // (d!)
  if (y16.defined()) return y16;
  return y.scalar_type() == out ? y : y.to(out);
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& scale,
                   const at::Tensor& gamma, const at::Tensor& beta, at::Tensor& running_mean, at::Tensor& running_var,
                   at::Tensor& num_batches_tracked, c10::string_view kind, c10::string_view precision, bool training,
                   double eps, std::optional<double> momentum, std::optional<c10::string_view> gemm_path,
                   const std::optional<at::Tensor>& z_out) {
  return *forward_impl(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, kind,
                       precision, training, eps, momentum, gemm_path, z_out, false);
}

TORCH_LIBRARY_IMPL(fusedlib, CUDA, m) { m.impl(FL_STR(FL_STAGE), &forward); }

// Data parallelism (docs/design.md §14): torch.ops.fusedlib.sync_train's CUDA kernel
// (fusedlib/cuda.py checks the batch, finds this rank and the GEMM path): a stage's train-mode
// forward over a batch spread across the ranks of process group group_name, in two phases around
// one all-gather, all on the current stream; nothing waits for the GPU.
// Under the first-row shift (fp32 and 3xTF32: common.cuh column_shift) every rank shifts by rank
// 0's first row, which one broadcast brings; on the other ranks it is the GEMM's external shift row
// (Problem::x0, x0_external): their GEMM runs over X − x₀, row 0 shifted as every other, and their
// moments, Z and Y are those of their own rows (no extra row, no copies).
// phase 1: the GEMM and this rank's column moments (4, M) [n; mean; M2; z₀] of the Z the stage
// holds; the all-gather of every rank's in rank order (rank 0 first: its z₀ is the shift's);
// phase 2: merged (Chan, rank order), the coefficients, the running buffers over the global
// batch, the row pass. Z is left in z_out (N, M). Returns Y (N, M) and the global batch's mean
// and biased variance of Z (2, M), which the backward needs.
std::vector<at::Tensor> sync_train(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
                                   const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
                                   at::Tensor running_mean, at::Tensor running_var, at::Tensor num_batches_tracked,
                                   const std::string& kind, const std::string& precision, double eps,
                                   std::optional<double> momentum, const std::string& gemm_path,
                                   const at::Tensor& z_out, const std::string& group_name, int64_t rank,
                                   int64_t ranks) {
  using namespace fl;
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
              "x, weight: the data-parallel kernels take float32 (fusedlib's modules convert bf16/fp16), got ",
              x_in.scalar_type(), " and ", weight.scalar_type());
  const Collectives group(group_name);
  const bool shift = first_row_shift(precision, true);
  at::Tensor x0;  // ranks ≠ 0 under the shift: rank 0's first row, the GEMM's external x₀
  if (shift) {  // rank 0's first row on every rank
    at::Tensor row = rank == 0 ? x_in.narrow(0, 0, 1).clone() : at::empty({1, x_in.size(1)}, x_in.options());
    group.broadcast(row, 0);
    if (rank != 0) x0 = row;
  }
  const int64_t rows = x_in.size(0), m = weight.size(0);
  at::Tensor y = at::empty({rows, m}, x_in.options()), moments = at::empty({4, m}, x_in.options()),
             stats = at::empty({2, m}, x_in.options());
  const auto phase = [&](const SyncArgs& args) {
    forward_impl(x_in, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, kind,
                 precision, true, eps, momentum, c10::string_view(gemm_path), z_out, false, &args);
  };
  phase({1, y, moments, stats, x0});
  // every rank's moments, rank after rank: (R·4, M), the shape each backend's all-gather into one tensor
  // takes (gloo splits its output along dim 0 into one chunk a rank, shaped as the input)
  at::Tensor gathered = at::empty({ranks * 4, m}, x_in.options());
  group.all_gather(gathered, moments);
  phase({2, y, gathered.view({ranks, 4, m}), stats, x0});
  return {y, stats};
}

// The forward of a bf16/fp16 train step with a gradient (docs/design.md §15), as the modules' eager
// call runs it: the stage's forward with a C++ autograd node in place of the operator's Python one
// (fusedlib.ops.StageFunction), whose backward is the backward extension's one C++ call
// (torch.ops.fusedlib.backward_sixteen, registered by torch_backward.cuh, redispatched straight to
// its CUDA kernel). After the module's forward the host makes no Python call for the step: at the
// KernelBench shapes a 16-bit step's kernels take less time than its Python calls took. Saves what
// StageFunction saves (Y for 84, the GEMM's Z: float32, or Z' in x's dtype at sums and fused; x, W,
// the scale, γ and β) and gives the same gradients bit for bit (the same kernels and GEMMs; under
// autocast a float32 W rounded inside, as fusedlib.ops._master_cast rounds it, and its gradient
// float32). *declined: forward_impl's checks sent the call to the operator's way (nothing was
// written; the caller returns None).
struct SixteenBitTrain : public torch::autograd::Function<SixteenBitTrain> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& scale, const at::Tensor& gamma,
                            const at::Tensor& beta, at::Tensor running_mean, at::Tensor running_var,
                            at::Tensor num_batches_tracked, c10::string_view kind, c10::string_view precision,
                            double eps, std::optional<double> momentum, bool* declined) {
    *declined = x.dim() != 2 || weight.dim() != 2;
    if (*declined) return at::empty({0}, x.options());
    const at::Tensor z =
        at::empty({x.size(0), weight.size(0)}, x.options().dtype(fl::kStageZ16 ? x.scalar_type() : at::kFloat));
    // autocast's float32 master weight: the kernels read it rounded to x's dtype (no node: inside
    // the node's forward); the node saves it as it came, so its gradient comes back in float32
    const at::Tensor w = weight.scalar_type() == x.scalar_type() ? weight : weight.to(x.scalar_type());
    std::optional<at::Tensor> y = forward_impl(x, w, bias, scale, gamma, beta, running_mean, running_var,
                                               num_batches_tracked, kind, precision, true, eps, momentum,
                                               std::nullopt, z, true);
    *declined = !y;
    if (*declined) return at::empty({0}, x.options());
    ctx->save_for_backward({kind == "84" ? *y : at::Tensor(), z, x, weight, scale, gamma, beta});
    ctx->saved_data["kind"] = std::string(kind);
    ctx->saved_data["eps"] = eps;
    return *y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    using Signature = std::vector<at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, const at::Tensor&, c10::string_view, double, bool);
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("fusedlib::backward_sixteen", "").typed<Signature>();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const std::string kind = ctx->saved_data["kind"].toStringRef();
    const at::Tensor &z = saved[1], &y_or_z = kind == "84" ? saved[0] : saved[1];
    // Autograd's worker thread may have no current CUDA context yet: cuBLAS's first call there makes
    // the primary one current, with a warning that says so, which is not the user's concern (the
    // operator's Python backward filters the same warning); every other warning goes on as it came.
    struct QuietContextWarning : c10::WarningHandler {
      c10::WarningHandler* next = c10::WarningUtils::get_warning_handler();
      void process(const c10::Warning& warning) override {
        if (warning.msg().find("no current CUDA context") == std::string::npos) next->process(warning);
      }
    } quiet;
    const c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    const std::vector<at::Tensor> g =
        op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CUDA), grads[0], y_or_z, z, saved[2], saved[3], saved[4],
                      saved[5], saved[6], kind, ctx->saved_data["eps"].toDouble(), ctx->needs_input_grad(0));
    // one gradient a forward argument, 14 (torch::autograd::Function's rule): x, W, b, the scale,
    // γ and β get theirs; the running buffers and the non-tensor arguments none
    torch::autograd::variable_list out(14);
    for (int i = 0; i < 6; ++i)
      if (ctx->needs_input_grad(i)) out[i] = g[i];
    return out;
  }
};

// Whether the backward extension is loaded (its CUDA kernel of torch.ops.fusedlib.backward_sixteen
// registered): fusedlib.cuda.eager_forward loads it before a 16-bit train call that needs a gradient.
static bool backward_sixteen_ready() {
  static std::atomic<bool> ready{false};
  if (!ready) {
    const auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("fusedlib::backward_sixteen", ""));
    ready = op && op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
  }
  return ready;
}

// The modules' eager call (fusedlib.cuda.eager_forward): eager_forward(x, weight, bias, scale,
// gamma, beta, running_mean, running_var, num_batches_tracked, kind, precision, training, eps,
// momentum) — the operator's arguments up to momentum — runs
// the forward on the device's default GEMM path (under torch.autocast to bf16/fp16 after the
// operators' autocast rule) and returns Y (a bf16/fp16 train call that needs a gradient: Y with
// SixteenBitTrain's node), or returns None where the call must take the operator
// (torch.ops.fusedlib.<stage>, through the dispatcher) instead: any other call that needs a
// gradient (grad mode on and x or a parameter requiring grad), a dispatch mode
// or a tensor subclass (FakeTensor) must see the call, $FUSEDLIB_GEMM_PATH forces a path, or an
// argument fails a check (the operator's way raises the error). A METH_FASTCALL function that
// reads its arguments with the CPython API: pybind11's casts cost ≈ 0.2 µs a tensor argument
// (on a 2024 desktop CPU, several times that on a slow host), more than this whole function's
// own work before the launches.
static PyObject* eager_forward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  constexpr int kTensors = 9, kArgs = 14;
  if (nargs != kArgs) Py_RETURN_NONE;
  at::Tensor t[kTensors];
  for (int i = 0; i < kTensors; ++i) {
    if (!THPVariable_Check(args[i])) Py_RETURN_NONE;
    t[i] = THPVariable_Unpack(args[i]);
    if (t[i].key_set().has_any(c10::python_ks | c10::functorch_transforms_ks)) Py_RETURN_NONE;
  }
  bool grad = false;
  if (at::GradMode::is_enabled())
    for (int i = 0; i < 6; ++i) grad = grad || t[i].requires_grad();
  if (c10::impl::dispatch_mode_enabled()) Py_RETURN_NONE;
  const char* forced = std::getenv("FUSEDLIB_GEMM_PATH");
  if (forced && forced[0] && std::string_view(forced) != "auto") Py_RETURN_NONE;
  Py_ssize_t kind_len = 0, prec_len = 0;
  const char* kind = PyUnicode_Check(args[9]) ? PyUnicode_AsUTF8AndSize(args[9], &kind_len) : nullptr;
  const char* prec = PyUnicode_Check(args[10]) ? PyUnicode_AsUTF8AndSize(args[10], &prec_len) : nullptr;
  PyObject *training = args[11], *momentum = args[13];
  if (!kind || !prec || !PyBool_Check(training) || !PyFloat_Check(args[12]) ||
      !(momentum == Py_None || PyFloat_Check(momentum)))
    Py_RETURN_NONE;
  const std::optional<double> momentum_value =
      momentum == Py_None ? std::nullopt : std::optional<double>(PyFloat_AS_DOUBLE(momentum));
  // Under torch.autocast to bf16/fp16: the operators' autocast rule (fusedlib/ops.py,
  // _register_autocast) applied here, the call then below autocast as the rule's is: x in the
  // autocast dtype, W too except a float32 W of a train call with a gradient (a master weight,
  // which SixteenBitTrain rounds inside its node), b rounded to it and back to float32 (the vectors
  // and buffers as they are).
  std::optional<c10::impl::ExcludeDispatchKeyGuard> below_autocast;
  if (at::autocast::is_autocast_enabled(at::kCUDA)) {
    const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    if (dtype != at::kBFloat16 && dtype != at::kHalf) Py_RETURN_NONE;
    below_autocast.emplace(c10::DispatchKeySet(c10::DispatchKey::AutocastCUDA));
    const bool master = grad && training == Py_True && t[1].scalar_type() == at::kFloat;
    for (int i = 0; i < 3; ++i)
      if (t[i].is_floating_point() && !(i == 1 && master)) t[i] = t[i].to(dtype);
    t[2] = t[2].to(at::kFloat);
  }
  if (grad) {
    const at::ScalarType dtype = t[0].scalar_type();
    const bool master = below_autocast && t[1].scalar_type() == at::kFloat;
    if (training != Py_True || (dtype != at::kBFloat16 && dtype != at::kHalf) ||
        (t[1].scalar_type() != dtype && !master) || !backward_sixteen_ready())
      Py_RETURN_NONE;
    bool declined = true;
    at::Tensor y = SixteenBitTrain::apply(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8],
                                          c10::string_view(kind, kind_len), c10::string_view(prec, prec_len),
                                          PyFloat_AS_DOUBLE(args[12]), momentum_value, &declined);
    if (declined) Py_RETURN_NONE;
    return THPVariable_Wrap(std::move(y));
  }
  std::optional<at::Tensor> y = forward_impl(
      t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], c10::string_view(kind, kind_len),
      c10::string_view(prec, prec_len), training == Py_True, PyFloat_AS_DOUBLE(args[12]), momentum_value,
      std::nullopt, std::nullopt, true);
  if (!y) Py_RETURN_NONE;
  return THPVariable_Wrap(std::move(*y));
  END_HANDLE_TH_ERRORS
}

static PyMethodDef fl_methods[] = {
    {"eager_forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(eager_forward)), METH_FASTCALL,
     "Y, or None where the call must go through the operator (fusedlib/kernels/torch_op.cuh)."},
    {nullptr, nullptr, 0, nullptr}};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  PyModule_AddFunctions(m.ptr(), fl_methods);
  m.def("sync_train", &sync_train, "torch.ops.fusedlib.sync_train's CUDA kernel (fusedlib/kernels/torch_op.cuh).");
}
