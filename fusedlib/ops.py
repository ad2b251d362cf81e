"""The stages as PyTorch operators: ``torch.ops.fusedlib.naive``, ``.fold``, ``.sums`` and
``.fused``, registered with :mod:`torch.library`.

Schema (every stage)::

    fusedlib::<stage>(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma,
        Tensor beta, Tensor(a!) running_mean, Tensor(b!) running_var,
        Tensor(c!) num_batches_tracked, str kind, str precision, bool training, float eps,
        float? momentum, str? gemm_path=None, Tensor(d!)? z_out=None) -> Tensor

x (N, K), weight (M, K), bias (M), scale (1) or (M), gamma/beta (bn.weight, bn.bias) and the
running buffers (M): float32 (float64 too on the CPU); num_batches_tracked: int64 scalar;
kind "84" (softmax(s·BN(Z))) or "33" (BN(Z∘s), problems 33 and 39); precision "fp32",
"tf32" or "3xtf32"; returns Y (N, M). In train mode the operator updates running_mean,
running_var and num_batches_tracked in place, as ``nn.BatchNorm1d`` does (the schema
declares the three mutations, so ``torch.compile`` functionalizes them); momentum None is
the cumulative average, computed on the device (no host sync: CUDA-graph capturable).
``gemm_path`` forces the CUDA GEMM path (``simt``, ``mma``, ``wgmma``; None: the device's
default, :func:`fusedlib.engine.select_path`; the CPU kernel ignores it). ``z_out`` (N, M), train mode
only: the forward also leaves there the GEMM output Z it normalised (Z' = XWᵀ, or XWᵀ + b for
naive and fold; at fp32 and 3xtf32, every stage, Z − Z₀ = (X − x₀)Wᵀ, x₀ the batch's first row: the
first-row shift of :func:`fusedlib.algebra.train_gemm`; the backward reads only Z − μ), which the backward needs
(:class:`StageFunction` passes it whenever a gradient is needed).

``torch.ops.fusedlib.train_backward(dy, y, z, x, weight, scale, gamma, beta, kind, precision,
eps) -> (dx, dweight, dbias, dscale, dgamma, dbeta)``: the train-mode
gradients (batch statistics) of every stage, from dY (N, M), the forward's Y (84; None for
33, whose backward does not read it) and its saved Z. CPU kernel:
:func:`fusedlib.algebra.train_backward_fused`; CUDA kernel (registered by :mod:`fusedlib.cuda`): the fused backward
(``fusedlib/kernels/backward.cu``: row terms, one pass of column partials with an in-order
merge, one elementwise dZ' written row-major and transposed) and the two GEMMs
dX = dZ'·W, dW = dZ'ᵀ·X on cuBLAS at the forward's precision (:func:`backward_gemms`).

Kernels: CPU, the stage algebra (:func:`fusedlib.algebra.stage_forward`); CUDA, the stage's
kernels (``fusedlib/kernels/torch_op.cuh``, registered when :func:`fusedlib.build.load_stage`
loads the stage's extension); fake (meta), for tracing; Autograd, the derived backward
(:func:`fusedlib.algebra.train_backward`, :func:`~fusedlib.algebra.eval_backward`) through
:class:`StageFunction` whenever a gradient is needed, on both devices. ``torch.library.opcheck``
covers schema, fake tensor, AOT dispatch and autograd registration (tests/test_ops.py and,
on CUDA, tests/test_gpu_operator.py).

Saved for the backward (train mode): Y and Z for 84, Z for 33 (two and one N×M tensors;
Y is the output itself); eager PyTorch saves three for 84 (the Linear's, BatchNorm's and the
softmax's outputs).
"""
from __future__ import annotations

import warnings

import torch
import torch.autograd.forward_ad as _forward_ad
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

_functorch_active = torch._C._are_functorch_transforms_active

from . import algebra, engine

__all__ = ["OPS", "SCHEMA", "SYNC_SCHEMA", "StageFunction", "SyncStageFunction", "backward_gemms", "eager_call",
           "needs_grad", "stage_op", "sync_train", "train_backward", "train_backward_call"]

SCHEMA = ("(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma, Tensor beta, "
          "Tensor(a!) running_mean, Tensor(b!) running_var, Tensor(c!) num_batches_tracked, str kind, "
          "str precision, bool training, float eps, float? momentum, str? gemm_path=None, "
          "Tensor(d!)? z_out=None) -> Tensor")
_LIB = torch.library.Library("fusedlib", "DEF")
_DIFFERENTIABLE = 6  # x, weight, bias, scale, gamma, beta
_PRECISION, _GEMM_PATH = 10, 14  # the schema's positions of precision and gemm_path


def needs_grad(args) -> bool:
    """Whether a call with the operator's arguments ``args`` (schema order) needs autograd:
    grad mode on and x or a parameter (the first six arguments) requiring grad.

    Raises:
        NotImplementedError: one of them carries a forward-mode tangent (``torch.func.jvp``,
            ``torch.autograd.forward_ad``): the operators derive no JVP, and below autograd the
            tangent would be dropped without a word.
    """
    if forward_ad_open():
        refuse_forward_ad(args[:_DIFFERENTIABLE])
    return torch.is_grad_enabled() and any(t.requires_grad for t in args[:_DIFFERENTIABLE])


def forward_ad_open() -> bool:
    """Whether a ``torch.autograd.forward_ad.dual_level`` is open (``torch.func.jvp`` opens one):
    only then can a tensor carry a tangent. One attribute read, for the forward's hot path."""
    return _forward_ad._current_level >= 0


def transformed() -> bool:
    """Whether a call may carry a tangent or run under a ``torch.func`` transform (grad, vjp,
    jacrev, vmap, jvp): a forward-mode dual level is open or functorch's interpreter stack is not
    empty. Two reads, for the forward's hot path: where True, the forward takes the route that
    :func:`refuse_transforms` guards."""
    return _forward_ad._current_level >= 0 or _functorch_active()


def refuse_transforms(tensors) -> None:
    """Raise where the operators cannot give a transform's answer: a forward-mode tangent on one
    of ``tensors`` (:func:`refuse_forward_ad`), or any ``torch.func`` transform, whose wrapped
    tensors the kernels cannot read (``torch.func.grad``/``vjp`` need an autograd.Function of
    another form, ``vmap`` a batching rule; neither is derived for the fused operators).

    Raises:
        NotImplementedError: naming the transform and what to use instead.
    """
    if forward_ad_open():
        refuse_forward_ad(tensors)
    if _functorch_active():
        raise NotImplementedError(
            "fusedlib: torch.func transforms (grad, vjp, jacrev, vmap) are not supported by the fused operators; "
            "use torch.autograd.grad or .backward() (first and second derivatives), or apply torch.func to the eager "
            "reference model (fusedlib.reference.make_reference, its parameters loaded from the fused module's "
            "state_dict)")


def refuse_forward_ad(tensors) -> None:
    """Raise where a tensor of ``tensors`` carries a forward-mode tangent.

    Raises:
        NotImplementedError: naming forward-mode AD and what to use instead.
    """
    if any(isinstance(t, torch.Tensor) and _forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise NotImplementedError(
            "fusedlib: forward-mode AD (torch.func.jvp, torch.autograd.forward_ad) is not derived for the fused "
            "operators; compute the JVP on the eager reference model (fusedlib.reference.make_reference, its "
            "parameters loaded from the fused module's state_dict)")


def backward_gemms(dz: torch.Tensor, dzt: torch.Tensor, xs: torch.Tensor, weight: torch.Tensor | None,
                   precision: str, need_dx: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's GEMMs on cuBLAS at the forward's precision: dX = dZ'·W (N, K) and
    dW = dZ'ᵀ·X (M, K); with ``need_dx`` False only dW (dX an empty (0,) tensor).

    Args:
        dz: (P, N, M) dZ'; dzt: (P, M, N) its transpose, contiguous (both GEMMs then read
            K-major operands: cuBLAS's fast layout, 0.36 ms against 0.63 for dZ'ᵀ as a view
            at 84 in TF32, results/h100/NOTES.md run40). P = 1, or for "3xtf32" 2: the TF32
            parts [big; small].
        xs: (P, N, K) dW's X operand: X, or X − x̄ (train mode, :func:`x_operand`); for
            "3xtf32" its TF32 parts [big; small].
        weight: (M, K); for "3xtf32" its TF32 parts (2, M, K) [big; small], formed from the
            weight as it is at this call (:func:`fusedlib.algebra.tf32_split`, or the backward
            extension's ``tf32_parts``); None without ``need_dx``.
        precision: "fp32", "tf32" or "3xtf32".

    3xTF32 (CUTLASS example 27): each GEMM is three TF32 products, small terms first, into
    one float32 result: dZs·Wb + dZb·Ws + dZb·Wb (addmm accumulates in place), over slices
    of the inner dimension (:func:`three_tf32`).
    """
    if precision != "3xtf32":
        with engine.cublas_precision(precision):
            return dz[0] @ weight if need_dx else xs.new_empty(0), dzt[0] @ xs[0]
    dx = xs.new_empty(0)
    if need_dx:
        dx = three_tf32(dz[0], dz[1], weight[0], weight[1])
    return dx, three_tf32(dzt[0], dzt[1], xs[0], xs[1])


def x_operand(ext, x: torch.Tensor, precision: str, total: torch.Tensor | None = None) -> torch.Tensor:
    """dW's X operand in train mode, (P, N, K) float32 on x's device, from the backward
    extension ``ext``: X − x̄ for "fp32" (P = 1) and its TF32 parts for "3xtf32" (P = 2),
    x̄ the column mean over the batch (dW = dZ'ᵀ(X − x̄) = dZ'ᵀX as Σ_i dZ' = 0, without the
    cancellation of dZ'ᵀX on inputs far from zero: :func:`fusedlib.algebra.train_backward_fused`);
    for "tf32" X itself (P = 1, a view: TF32 operands cannot resolve such inputs anyway, and
    the centering pass would cost 3–7 % of its train step). ``total`` (data parallelism): the
    ranks' Σ_i X and N (K + 1 floats), whose x̄ every rank centres on (Σ_i dZ' = 0 holds over
    the global batch only)."""
    if precision == "tf32":
        return x[None]
    if total is not None:
        return ext.centered_x_about(x.contiguous(), precision == "3xtf32", total)
    return ext.centered_x(x.contiguous(), precision == "3xtf32")


#: The inner-dimension slice of :func:`three_tf32`: cuBLAS's TF32 GEMMs accumulate on the
#: tensor cores, whose float32 sums lose low bits at each step, so the error grows with the
#: inner length L — ≈ 2.6e-9·L normwise on the H100, 2e-5 at L = 8192 against PyTorch fp32's
#: 6e-6 (results/h100/NOTES.md, run42); added slice by slice in the GEMM's float32 epilogue,
#: it stays at the length of a slice (≈ 5e-6).
TF32_SLICE = 2048


def three_tf32(a_big: torch.Tensor, a_small: torch.Tensor, b_big: torch.Tensor, b_small: torch.Tensor,
               slice_len: int = TF32_SLICE) -> torch.Tensor:
    """A·B in 3xTF32 on cuBLAS from TF32 parts: A (P, L) = a_big + a_small, B (L, Q) =
    b_big + b_small (each part exactly TF32, :func:`fusedlib.algebra.tf32_split`).

    For each slice of ``slice_len`` along L, in order: As·Bb, Ab·Bs, Ab·Bb, each added to the
    float32 result by the GEMM's epilogue (β = 1), so that the tensor cores' accumulation
    never runs longer than a slice (:data:`TF32_SLICE`). Returns (P, Q) float32.
    """
    out = None
    with engine.cublas_precision("tf32"):
        for start in range(0, a_big.shape[1], slice_len):
            cols = slice(start, start + slice_len)
            ab, as_, bb, bs = a_big[:, cols], a_small[:, cols], b_big[cols], b_small[cols]
            out = as_ @ bb if out is None else out.addmm_(as_, bb)
            out.addmm_(ab, bs).addmm_(ab, bb)
    return out


@torch.library.custom_op("fusedlib::train_backward", mutates_args=())
def train_backward(dy: torch.Tensor, y: torch.Tensor | None, z: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                   scale: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, kind: str, precision: str, eps: float,
                   need_dx: bool = True, stats: torch.Tensor | None = None, group_name: str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train-mode gradients of a stage's forward (batch statistics), every stage alike.

    Args:
        dy: (N, M) ∂L/∂Y. y: (N, M) the forward's output (84), None for 33. z: (N, M) the
            GEMM output the forward normalised (its ``z_out``). x (N, K), weight (M, K),
            scale (1,) or (M,), gamma/beta (M,): the forward's inputs. kind "84"/"33";
            precision of the forward; eps BatchNorm's ε.
            need_dx: False when x needs no gradient (the data entering a network's first
            layer): dX's GEMM (a third of the backward's FLOPs) is skipped, as PyTorch's
            autograd skips it.
            stats, group_name: data parallelism (:func:`sync_train`): the global batch's column
            mean and variance of ``z`` (2, M) that the forward used, and the process group whose
            ranks hold the rest of the batch; the backward sums its column sums over them in one
            all-reduce (:func:`fusedlib.algebra.train_backward_fused` with ``reduce``). None:
            this process's batch alone.

    Returns:
        (dx (N, K), or (0,) empty without need_dx, dweight (M, K), dbias (M,) zeros — the bias
        cancels —, dscale (scale's shape), dgamma (M,), dbeta (M,)). CPU: :func:`fusedlib.algebra.train_backward_fused`
        (float32 or float64); CUDA: float32, the fused kernels then :func:`backward_gemms`.
    """
    algebra.check_kind(kind)
    low = {name: t.dtype for name, t in (("x", x), ("weight", weight), ("scale", scale), ("gamma", gamma),
                                          ("beta", beta))}
    if any(t.dtype in algebra.LOW_PRECISION for t in (z, x, weight)):  # §15: in float32, gradients in each input's dtype
        f = torch.float32
        dy, z, x, weight, scale, gamma, beta = (t.to(f) for t in (dy, z, x, weight, scale, gamma, beta))
        y = None if y is None else y.to(f)
        stats = None if stats is None else stats.to(f)
    if group_name is None:
        mean, var = algebra.column_stats_two_pass(z)
        reduce = None
    else:
        mean, var = stats[0], stats[1]
        reduce = _all_reduce(group_name)
    dx, dw, db, ds, dg, dbeta = algebra.train_backward_fused(kind, dy, y, z - mean, var, x, weight, scale, gamma,
                                                             beta, eps, reduce=reduce)
    dx = dx.to(low["x"]) if need_dx else x.new_empty(0, dtype=low["x"])
    return (dx, dw.to(low["weight"]), db.to(low["weight"]), ds.to(low["scale"]), dg.to(low["gamma"]),
            dbeta.to(low["beta"]))


@train_backward.register_fake
def _train_backward_fake(dy, y, z, x, weight, scale, gamma, beta, kind, precision, eps, need_dx=True, stats=None,
                         group_name=None):
    return (torch.empty_like(x) if need_dx else x.new_empty(0), torch.empty_like(weight),
            weight.new_empty(weight.shape[0]),  # dbias in the weight's dtype (a bf16 Linear beside a float32 BatchNorm)
            torch.empty_like(scale), torch.empty_like(gamma), torch.empty_like(beta))


#: A bf16/fp16 train step's backward in one C++ call, CUDA only, as an operator: its kernel is
#: ``backward_sixteen`` of the backward extension (``fusedlib/kernels/torch_backward.cuh``, registered
#: when :func:`fusedlib.build.load_backward` loads it), and the 16-bit train forward's C++ autograd
#: node (``fusedlib/kernels/torch_op.cuh``) calls it through the dispatcher: the way from one
#: extension to the other without Python. Internal: :func:`train_backward` is the public backward.
_LIB.define("backward_sixteen(Tensor dy, Tensor y, Tensor z, Tensor x, Tensor weight, Tensor scale, Tensor gamma, "
            "Tensor beta, str kind, float eps, bool need_dx) -> Tensor[]")

#: train_backward's and sync_train's CUDA kernels as plain functions, set by :mod:`fusedlib.cuda`
#: where it registers them; None until then. The eager route to them: :func:`eager_call`.
_CUDA_TRAIN_BACKWARD = _CUDA_SYNC_TRAIN = None
#: Tensor types that dispatch as plain tensors (a Parameter overrides nothing).
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: Whether a tensor is on a device type, without making a torch.device (which costs more).
_ON_DEVICE = {"cuda": lambda t: t.is_cuda, "cpu": lambda t: t.is_cpu}


def eager_call(tensors, device_type: str = "cuda") -> bool:
    """True when a call with these tensors (None allowed) may run a kernel's function directly,
    skipping the dispatcher and the custom operator's wrappers: every tensor a plain
    ``torch.Tensor`` (or ``nn.Parameter``) on ``device_type`` ("cuda" or "cpu"), no dispatch
    mode or torch-function mode active (FakeTensor, tracing), no functorch transform active
    (vmap, grad, functionalize: their wrapped tensors are plain in type), not tracing
    (``torch.compile``). A tensor subclass (the Python dispatch key) fails the type test. Anything
    else goes through the operator, which sees it. Each test is one call, none makes an object:
    this runs on every eager forward and backward."""
    if (torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()
            or torch._C._are_functorch_transforms_active()):
        return False
    if _current_dispatch_mode() is not None:
        return False
    on_device = _ON_DEVICE[device_type]
    return all(t is None or (type(t) in _PLAIN and on_device(t)) for t in tensors)


#: The backend dispatch key of each device type the stage operators have kernels for.
_BACKEND_KEYS = {"cpu": torch._C.DispatchKeySet(torch._C.DispatchKey.CPU),
                 "cuda": torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)}


def _below_autograd(op, tensors):
    """``op``, or where :func:`eager_call` allows on the first tensor's device, ``op`` sent
    straight to that device's kernel: the dispatcher's Autograd pass (a Python kernel: the caller
    is already the autograd Function) and its ADInplaceOrView pass (the kernels bump the versions
    of what they write) left out."""
    device_type = tensors[0].device.type
    if device_type in _BACKEND_KEYS and eager_call(tensors, device_type):
        keys = _BACKEND_KEYS[device_type]
        return lambda *args, **kwargs: op.redispatch(keys, *args, **kwargs)
    return op


def _cuda_kernel_or(op, kernel, tensors):
    """``kernel`` (an operator's CUDA kernel as a plain function, or None before
    :mod:`fusedlib.cuda` registered it) where :func:`eager_call` allows for ``tensors``, else
    the operator ``op``."""
    return kernel if kernel is not None and eager_call(tensors) else op


def train_backward_call(dy, y, z, x, weight, scale, gamma, beta, kind, precision, eps, need_dx=True, stats=None,
                        group_name=None):
    """:func:`train_backward`'s result, from its CUDA kernel's function directly where
    :func:`eager_call` allows (the backward of every CUDA train step: the custom operator's
    Python wrappers cost the host more than the backward's kernels take to launch, and a
    data-parallel step, whose GPUs wait for each other's hosts, pays that time on every rank),
    else through the operator."""
    args = (dy, y, z, x, weight, scale, gamma, beta, kind, precision, eps, need_dx, stats, group_name)
    tensors = (dy, y, z, x, weight, scale, gamma, beta, stats)
    return _cuda_kernel_or(train_backward, _CUDA_TRAIN_BACKWARD, tensors)(*args)


def _master_cast(args) -> tuple:
    """The operator's arguments (schema order) for its kernels: a float32 weight beside a 16-bit x
    on CUDA (a master weight, as the autocast rule passes it: :func:`_register_autocast`) rounded
    to x's dtype, as the 16-bit kernels read it (one cast, the one eager autocast makes of
    ``nn.Linear``'s weight); any other ``args`` as they are. Called below autograd, so that the
    weight's gradient is computed for the float32 weight itself (:func:`train_backward`: the GEMM's
    float32 output). The dtypes alone decide, not autocast's state: the rule's own call runs with
    autocast's dispatch key excluded (``torch.is_autocast_enabled`` is False there), a compiled
    graph replays the call without autocast, and a backward runs outside it."""
    x, weight = args[0], args[1]
    if x.is_cuda and x.dtype in algebra.LOW_PRECISION and weight.dtype == torch.float32:
        return (x, weight.to(x.dtype), *args[2:])
    return args


class StageFunction(torch.autograd.Function):
    """The stage's forward (its operator, below autograd) with the derived backward.

    ``apply(op, args)``: ``args`` the operator's arguments in schema order. The running
    buffers travel inside ``args`` (a tuple), out of autograd's sight: they get no gradient,
    as in BatchNorm. Train mode: the forward also keeps Z (``z_out``) and the backward is
    :func:`train_backward` (saved: Y (84), Z, x, weight, scale, gamma, beta; nothing derived
    from a parameter). Eval mode: saves Y, x and the parameters and buffers, and the
    backward (:func:`fusedlib.algebra.eval_backward`) recomputes Z = X Wᵀ + b at the forward's
    precision. A float32 weight beside a 16-bit x (autocast's master weight) reaches the kernels
    rounded to x's dtype (:func:`_master_cast`) and is saved as it came: its gradient is float32.
    """

    @staticmethod
    def forward(ctx, op, args, x, weight, bias, scale, gamma, beta):
        kind, precision, training, eps = args[9:13]
        ctx.kind, ctx.precision, ctx.training, ctx.eps = kind, precision, training, eps
        call = _below_autograd(op, (x, weight, bias, scale, gamma, beta, *args[6:9]))
        w = _master_cast((x, weight))[1]  # the kernels' weight; the saved one stays as it came
        if not training:
            y = call(x, w, bias, scale, gamma, beta, *args[_DIFFERENTIABLE:])
            # (Y only for 84's backward: 33's reads none, and a saved Y would refuse an in-place op after it)
            ctx.save_for_backward(y if kind == "84" else None, x, weight, bias, scale, gamma, beta, args[6], args[7])
            return y
        # Z' as the stage keeps it (§15): x's dtype on the CPU and, for a 16-bit x, at the stages that
        # keep it so on CUDA (algebra.Z16_STAGES); else float32
        z16 = not x.is_cuda or (x.dtype in algebra.LOW_PRECISION and op._opname in algebra.Z16_STAGES)
        z = x.new_empty(x.shape[0], weight.shape[0], dtype=x.dtype if z16 else torch.float32)
        y = call(x, w, bias, scale, gamma, beta, *args[_DIFFERENTIABLE:], z_out=z)
        ctx.save_for_backward(y if kind == "84" else None, z, x, weight, scale, gamma, beta)
        return y

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():  # create_graph=True: this backward is itself differentiated
            return (None, None, *_differentiable_backward(ctx, dy))
        # Autograd runs a CUDA backward on a thread of its own, where cuBLAS's first call finds no
        # current CUDA context, warns, and makes the primary context current: the right one.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
            if ctx.training:
                y, z, x, weight, scale, gamma, beta = ctx.saved_tensors
                need_dx = ctx.needs_input_grad[2]
                grads = train_backward_call(dy, y, z, x, weight, scale, gamma, beta, ctx.kind, ctx.precision,
                                            ctx.eps, need_dx)
                grads = (grads[0] if need_dx else None, *grads[1:])
            else:
                saved = ctx.saved_tensors
                y, x, weight, bias, scale, gamma, beta, running_mean, running_var = saved
                dtypes = [t.dtype for t in (x, weight, bias, scale, gamma, beta)]
                precision = ctx.precision
                if x.dtype in algebra.LOW_PRECISION:  # in float32, the gradients in each input's dtype (§15)
                    # (a master weight as the forward's kernels read it: rounded to x's dtype)
                    dy, y, x, weight, bias, scale, gamma, beta, running_mean, running_var = (
                        None if t is None else t.float() for t in (dy, y, *_master_cast((x, weight)), *saved[3:]))
                    # fp32, not the module's TF32: 16-bit X and W are exact in either, and dZ' @ W
                    # then depends on no global switch (a compiled backward's GEMMs run at the
                    # switch's state when they run, not at the one set around the tracing)
                    precision = "fp32"
                with engine.cublas_precision(precision):
                    z = algebra.matmul_nt(x, weight, precision) + bias  # Z as the forward's GEMM made it
                    grads = algebra.eval_backward(ctx.kind, dy, y, z, x, weight, scale, gamma, beta, running_mean,
                                                  running_var, ctx.eps)
                grads = tuple(g.to(d) for g, d in zip(grads, dtypes))
        return (None, None, *grads)


def _differentiable_backward(ctx, dy: torch.Tensor) -> tuple:
    """:class:`StageFunction`'s gradients when autograd records the backward itself
    (``torch.autograd.grad(..., create_graph=True)`` or ``backward(create_graph=True)``: a
    gradient penalty, a Hessian-vector product, double backward). The kernels' backward has no
    derivative of its own, and a backward run without its graph would drop the second-order
    terms without a word; so here the gradients are autograd's through the same model in PyTorch's
    differentiable operators (:func:`fusedlib.reference.functional_forward`), from the saved
    inputs, at the forward's GEMM precision (:func:`fusedlib.engine.cublas_precision`; 3xtf32 as
    fp32), the graph reaching x, the parameters and dY. bf16/fp16 inputs are computed in float32 and
    their gradients returned in their dtypes (§15). Train mode: batch statistics, as the forward,
    and the Linear's bias a zero gradient (it cancels in them), as the kernels' backward gives it.

    Returns:
        (dx, dweight, dbias, dscale, dgamma, dbeta), None where ``ctx.needs_input_grad`` is False.
    """
    from .reference import functional_forward
    if ctx.training:
        _, _, x, weight, scale, gamma, beta = ctx.saved_tensors
        bias = running_mean = running_var = None
    else:
        _, x, weight, bias, scale, gamma, beta, running_mean, running_var = ctx.saved_tensors
    inputs = (x, weight, bias, scale, gamma, beta)
    wanted = [i for i, t in enumerate(inputs) if t is not None and ctx.needs_input_grad[2 + i]]
    low = x.dtype in algebra.LOW_PRECISION
    f32 = (lambda t: t.float() if low and t is not None else t)
    with torch.enable_grad(), engine.cublas_precision(ctx.precision):
        w = _master_cast((x, weight))[1]  # a master weight as the kernels read it (differentiably)
        y = functional_forward(ctx.kind, *(f32(t) for t in (x, w, bias, scale, gamma, beta, running_mean,
                                                              running_var)), ctx.training, ctx.eps)
        found = torch.autograd.grad(y, [inputs[i] for i in wanted], f32(dy), create_graph=True, allow_unused=True)
    grads = [None] * 6
    for i, g in zip(wanted, found):
        grads[i] = g if g is not None else torch.zeros_like(inputs[i])
    if ctx.training and ctx.needs_input_grad[4]:
        grads[2] = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
    return tuple(grads)


def _define(stage: str):
    _LIB.define(stage + SCHEMA)
    op = getattr(torch.ops.fusedlib, stage).default

    def cpu(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, kind, precision,
            training, eps, momentum, gemm_path=None, z_out=None):
        if z_out is not None:
            if not training or z_out.shape != (x.shape[0], weight.shape[0]):
                raise ValueError(f"z_out: expected a ({x.shape[0]}, {weight.shape[0]}) tensor in train mode, got "
                                 f"{tuple(z_out.shape)} in {'train' if training else 'eval'} mode")
            if x.dtype in algebra.LOW_PRECISION:  # Z' from float32 sums, stored in x's dtype (§15)
                z_out.copy_(algebra.matmul_nt(x.float(), weight.float()))
            else:
                z_out.copy_(algebra.train_gemm(x, weight, precision)[0])  # Z', as sums and fused keep it
        bn = algebra.BNState(gamma, beta, running_mean, running_var, num_batches_tracked, momentum, eps)
        return algebra.stage_forward(kind, stage, x, weight, bias, scale, bn, training, precision)

    def fake(x, weight, bias, scale, *_):  # Y in x's dtype promoted with the scale's (§15), as both kernels
        return x.new_empty(x.shape[0], weight.shape[0], dtype=torch.promote_types(x.dtype, scale.dtype))

    def autograd_kernel(keyset, *args):
        if needs_grad(args):
            return StageFunction.apply(op, args, *args[:_DIFFERENTIABLE])
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *_master_cast(args))

    _LIB.impl(stage, cpu, "CPU")
    torch.library.register_fake(f"fusedlib::{stage}", fake, lib=_LIB)
    _LIB.impl(stage, autograd_kernel, "Autograd", with_keyset=True)
    _register_autocast(stage, op, sixteen_bit=True)
    return op


def _register_autocast(name: str, op, sixteen_bit: bool = False, precision_at: int = _PRECISION) -> None:
    """The autocast rule of operator ``name`` (docs/design.md §15): under ``torch.autocast`` the
    Linear's operands x, W and b in the autocast dtype, as eager autocast runs ``nn.Linear``;
    BatchNorm's parameters and buffers stay as they are (the buffers are updated in place). On
    the CPU the operator takes the 16-bit tensors. On CUDA, with ``sixteen_bit`` (the stages'
    operators) and where the 16-bit kernels run (:func:`fusedlib.engine.sixteen_bit_kernels`),
    x as a 16-bit tensor, W as it is when float32 (a master weight: :func:`_master_cast` rounds
    it below autograd, so that its gradient comes back from the GEMM in float32, with no 16-bit
    dW cast back to it; any other W in the autocast dtype), b in the autocast dtype (the kernels
    widen it exactly; a round trip b.to(dtype).float() is what inductor's ``pointless_convert``
    removes under torch.compile, leaving b unrounded), and a
    ``gemm_path`` argument (chosen for float32 operands) replaced by the 16-bit kernels' path; otherwise all three
    rounded to the autocast dtype and converted back to float32, which is exact (a bf16 or fp16
    value is a TF32 value): the products 16-bit tensor cores form either way, at TF32 on CUDA where
    the GPU has it (``precision``, the schema's argument ``precision_at``:
    :func:`fusedlib.engine.widened_precision`). (Under torch.compile inductor removes those round
    trips, so a compiled call there multiplies the unrounded values: docs/design.md §15.)"""
    def rule(device: str, key):
        def autocast(*args):
            dtype = torch.get_autocast_dtype(device)
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
                x, weight = args[0], args[1]
                sixteen = (device == "cuda" and sixteen_bit and x.is_floating_point() and weight.is_floating_point()
                           and engine.sixteen_bit_kernels(torch.cuda.get_device_capability(x.device), x.shape[1]))
                master = sixteen and weight.dtype == torch.float32  # cast below autograd (StageFunction)
                cast = [t if (i == 1 and master) or t.dtype == torch.float64 else t.to(dtype) if t.is_floating_point()
                        else t for i, t in enumerate(args[:3])]  # (autocast leaves float64 as it is)
                rest = list(args[3:])
                if sixteen:  # b stays in the dtype: the kernels widen it (exact), and no float
                    # round trip is left for torch.compile's inductor to drop as a pointless convert
                    if len(args) > _GEMM_PATH and args[_GEMM_PATH] is not None:
                        cap = torch.cuda.get_device_capability(x.device)
                        rest[_GEMM_PATH - 3] = engine.select_path(args[_PRECISION], cap, x.shape[1], sixteen_bit=True)
                elif device == "cuda":
                    cast = [t.float() for t in cast]
                    cap = torch.cuda.get_device_capability(x.device)
                    rest[precision_at - 3] = engine.widened_precision(args[precision_at], cap)
                return op(*cast, *rest)
        return autocast

    _LIB.impl(name, rule("cpu", torch._C.DispatchKey.AutocastCPU), "AutocastCPU")
    _LIB.impl(name, rule("cuda", torch._C.DispatchKey.AutocastCUDA), "AutocastCUDA")


#: stage -> its operator, ``torch.ops.fusedlib.<stage>.default``.
OPS = {stage: _define(stage) for stage in algebra.STAGES}


def stage_op(stage: str):
    """The operator of ``stage`` (``torch.ops.fusedlib.<stage>``).

    Raises:
        ValueError: unknown stage.
    """
    if stage not in OPS:
        raise ValueError(f"stage: expected one of {algebra.STAGES}, got {stage!r}")
    return OPS[stage]


# ------------------------------------------------------------------ data parallelism (docs/design.md §14)
#: ``torch.ops.fusedlib.sync_train``: a stage's train-mode forward over a batch spread across the
#: ranks of a process group (``group_name``, ``torch.distributed``'s name of it). Returns Y and
#: the global batch's column (mean, variance) of the Z it leaves in ``z_out`` (2, M), which the
#: backward needs.
SYNC_SCHEMA = ("(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma, Tensor beta, "
               "Tensor(a!) running_mean, Tensor(b!) running_var, Tensor(c!) num_batches_tracked, str stage, str kind, "
               "str precision, float eps, float? momentum, str group_name, Tensor(d!) z_out) -> (Tensor, Tensor)")
_SYNC_PRECISION = 11  # the schema's position of precision


def _group(group_name: str):
    from torch.distributed import distributed_c10d
    return distributed_c10d._resolve_process_group(group_name)


def _all_gather(group_name: str):
    """This rank's tensor to every rank's, stacked in rank order (``torch.distributed.all_gather``)."""
    import torch.distributed as dist

    def gather(t: torch.Tensor) -> torch.Tensor:
        group = _group(group_name)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, t.contiguous(), group=group)
        return torch.stack(parts)
    return gather


def _all_reduce(group_name: str):
    """A tensor summed over the ranks (``torch.distributed.all_reduce``), as a new tensor."""
    import torch.distributed as dist

    def reduce(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t, group=_group(group_name))
        return t
    return reduce


class SyncStageFunction(torch.autograd.Function):
    """:func:`sync_train` below autograd, with the backward of :func:`train_backward` over the
    same process group (saved: Y (84), Z, the global statistics, x and the parameters). On
    plain CUDA tensors in eager mode (:func:`eager_call`) both run their CUDA kernels' functions
    directly, the dispatcher's second pass and the custom operator's wrappers left out."""

    @staticmethod
    def forward(ctx, args, x, weight, bias, scale, gamma, beta):
        stage, kind, precision, eps, momentum, group_name, z = args[9:16]
        ctx.kind, ctx.precision, ctx.eps, ctx.group_name = kind, precision, eps, group_name
        call = _cuda_kernel_or(_SYNC_OP, _CUDA_SYNC_TRAIN, (x, weight, bias, scale, gamma, beta, *args[6:9], z))
        y, stats = call(x, weight, bias, scale, gamma, beta, *args[_DIFFERENTIABLE:])
        ctx.save_for_backward(y if kind == "84" else None, z, stats, x, weight, scale, gamma, beta)
        ctx.mark_non_differentiable(stats)
        ctx.set_materialize_grads(False)  # (no zeros made for stats' gradient, which the backward ignores)
        return y, stats

    @staticmethod
    def backward(ctx, dy, _dstats):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "fusedlib: the backward of a train step across a process group cannot itself be differentiated "
                "(create_graph=True: a gradient penalty, double backward); compute such a term with the module's "
                "process_group set to None (this rank's batch) or in eval mode")
        y, z, stats, x, weight, scale, gamma, beta = ctx.saved_tensors
        need_dx = ctx.needs_input_grad[1]
        with torch.no_grad():
            grads = train_backward_call(dy, y, z, x, weight, scale, gamma, beta, ctx.kind, ctx.precision, ctx.eps,
                                        need_dx, stats, ctx.group_name)
        return (None, grads[0] if need_dx else None, *grads[1:])


def _define_sync():
    _LIB.define("sync_train" + SYNC_SCHEMA)
    op = torch.ops.fusedlib.sync_train.default

    def cpu(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, stage, kind,
            precision, eps, momentum, group_name, z_out):
        algebra.check_stage_precision(stage, precision)
        bn = algebra.BNState(gamma, beta, running_mean, running_var, num_batches_tracked, momentum, eps)
        seen = []
        gather = _all_gather(group_name)

        def collective(t):  # the one gather; its result also gives the backward's statistics
            seen.append(gather(t))
            return seen[-1]

        y = algebra.stage_forward(kind, stage, x, weight, bias, scale, bn, True, precision, gather=collective)
        # the Z whose moments were gathered (every stage's: XWᵀ + b in naive and fold, XWᵀ in sums and fused)
        z_out.copy_(algebra.matmul_nt(x, weight, precision) + (bias if stage in ("naive", "fold") else 0))
        mean, var, _ = algebra.merge_ranks(seen[0])
        return y, torch.stack([mean, var])

    def fake(x, weight, *_):
        return x.new_empty(x.shape[0], weight.shape[0]), x.new_empty(2, weight.shape[0])

    def autograd_kernel(keyset, *args):
        if needs_grad(args):
            return SyncStageFunction.apply(args, *args[:_DIFFERENTIABLE])
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIB.impl("sync_train", cpu, "CPU")  # (the CUDA kernel: fusedlib.cuda, beside the build it needs)
    torch.library.register_fake("fusedlib::sync_train", fake, lib=_LIB)
    _LIB.impl("sync_train", autograd_kernel, "Autograd", with_keyset=True)
    _register_autocast("sync_train", op, precision_at=_SYNC_PRECISION)
    return op


_SYNC_OP = _define_sync()


def sync_train(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, stage: str,
               kind: str, precision: str, eps: float, momentum: float | None, group_name: str):
    """A stage's train-mode forward over a batch spread across the ranks of a process group
    (docs/design.md §14): ``torch.ops.fusedlib.sync_train``, differentiable.

    Args:
        x (N_r, K): this rank's rows (N_r ≥ 1; the global batch ≥ 2). weight, bias, scale, gamma,
            beta, the running buffers, kind, precision, eps, momentum: as the stage operators'
            (:data:`SCHEMA`). stage: "naive", "fold", "sums" or "fused". group_name: the process
            group's name (``ProcessGroup.group_name``).

    Returns:
        Y (N_r, M): this rank's rows of the global batch's output. The running buffers are the
        global batch's, the same on every rank. One all-gather of 3·M floats a forward, one
        all-reduce of 2M + K + 1 floats a backward.

    Raises:
        ValueError: a global batch of one row (CUDA: a rank without rows, or one rank alone
            with one row); unknown stage or precision.
    """
    z = x.new_empty(x.shape[0], weight.shape[0])
    args = (x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, stage, kind,
            precision, eps, momentum, group_name, z)
    return _SYNC_OP(*args)[0]
