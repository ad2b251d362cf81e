"""run186 (CPU, here): the structure of run186's C++ autograd node, on the CPU, where it can be debugged.

On the GPU (logs/run186-first-try.log) run186's first node crashed the process in autograd's worker
thread. This builds the same structure with CPU stand-ins for the kernels: a torch::autograd::Function
taking forward's 14 arguments (9 tensors, then kind, precision, eps, momentum and the declined flag),
saving Y (84) and Z, whose backward reaches a kernel of another extension through the dispatcher
(an operator defined in Python, its CPU kernel registered in C++, redispatched straight to it) under
a warning handler that drops the CUDA-context warning and passes every other one on. With 9
gradients returned (as the first node did) the engine refuses: "returned an incorrect number of
gradients (expected 14, got 9)"; with 14 it runs, x's gradient only where x requires it, the context
warning dropped and the other one kept. Run: python lab/experiments/run186-node-cpu.py (about a
minute: two small builds).
"""
import torch
from torch.utils.cpp_extension import load_inline
lib = torch.library.Library("nodetest", "DEF")
lib.define("bwd(Tensor dy, Tensor y, Tensor z, Tensor x, Tensor weight, Tensor scale, Tensor gamma, Tensor beta, str kind, float eps, bool need_dx) -> Tensor[]")
bwd_src = r'''
#include <torch/extension.h>
std::vector<at::Tensor> bwd(const at::Tensor& dy, const at::Tensor& y, const at::Tensor& z, const at::Tensor& x,
    const at::Tensor& weight, const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta,
    c10::string_view kind, double eps, bool need_dx) {
  TORCH_WARN("Attempting to run cuBLAS, but there was no current CUDA context! x");
  TORCH_WARN("some other warning");
  at::Tensor dz = dy * 2;
  at::Tensor dx = need_dx ? at::mm(dz, weight) : x.new_empty({0});
  return {dx, at::mm(dz.t(), x), at::zeros_like(gamma), (dz.sum() * 0 + 1).reshape(scale.sizes()), gamma * 0 + 3, beta * 0 + 4};
}
TORCH_LIBRARY_IMPL(nodetest, CPU, m) { m.impl("bwd", &bwd); }
'''
b = load_inline("nodetest_bwd2", cpp_sources=bwd_src, functions=None, verbose=False, extra_cflags=["-O1"], is_python_module=False)
fwd_src = r'''
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>
struct Node16 : public torch::autograd::Function<Node16> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& scale, const at::Tensor& gamma,
                            const at::Tensor& beta, at::Tensor running_mean, at::Tensor running_var,
                            at::Tensor num_batches_tracked, c10::string_view kind, c10::string_view precision,
                            double eps, std::optional<double> momentum, bool* declined) {
    *declined = false;
    const at::Tensor z = at::mm(x, weight.t());
    at::Tensor y = at::softmax(z, 1);
    running_mean.add_(1);
    ctx->save_for_backward({kind == "84" ? y : at::Tensor(), z, x, weight, scale, gamma, beta});
    ctx->saved_data["kind"] = std::string(kind);
    ctx->saved_data["eps"] = eps;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    using Signature = std::vector<at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, const at::Tensor&, c10::string_view, double, bool);
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("nodetest::bwd", "").typed<Signature>();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const std::string kind = ctx->saved_data["kind"].toStringRef();
    const at::Tensor &z = saved[1], &y_or_z = kind == "84" ? saved[0] : saved[1];
    struct QuietContextWarning : c10::WarningHandler {
      c10::WarningHandler* next = c10::WarningUtils::get_warning_handler();
      void process(const c10::Warning& warning) override {
        if (warning.msg().find("no current CUDA context") == std::string::npos) next->process(warning);
      }
    } quiet;
    const c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    const std::vector<at::Tensor> g = op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), grads[0], y_or_z, z, saved[2], saved[3], saved[4],
                      saved[5], saved[6], kind, ctx->saved_data["eps"].toDouble(), ctx->needs_input_grad(0));
    torch::autograd::variable_list out(14);
    for (int i = 0; i < 6; ++i)
      if (ctx->needs_input_grad(i)) out[i] = g[i];
    return out;
  }
};
at::Tensor run(at::Tensor x, at::Tensor w, at::Tensor b, at::Tensor s, at::Tensor g, at::Tensor be, at::Tensor rm, at::Tensor rv, at::Tensor nbt, std::string kind) {
  bool declined = true;
  at::Tensor y = Node16::apply(x, w, b, s, g, be, rm, rv, nbt, c10::string_view(kind), c10::string_view("tf32"), 1e-5, std::optional<double>(0.1), &declined);
  return y;
}
'''
f = load_inline("nodetest_fwd2", cpp_sources=fwd_src, functions=["run"], verbose=False, extra_cflags=["-O1"])
for kind in ("84", "33"):
    for need_dx in (True, False):
        x = torch.randn(8, 4, requires_grad=need_dx); w = torch.randn(6, 4, requires_grad=True)
        b = torch.randn(6, requires_grad=True); s = torch.ones(1, requires_grad=True); g = torch.ones(6, requires_grad=True); be = torch.zeros(6, requires_grad=True)
        rm, rv, nbt = torch.zeros(6), torch.ones(6), torch.zeros((), dtype=torch.long)
        y = f.run(x, w, b, s, g, be, rm, rv, nbt, kind)
        print(kind, need_dx, y.grad_fn.name())
        import warnings
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            y.backward(torch.randn_like(y))
        print(" warnings:", [str(r.message)[:40] for r in rec])
        print(" grads", x.grad is not None, w.grad.shape, b.grad.sum().item(), s.grad, g.grad[0].item())
