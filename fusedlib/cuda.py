"""A fused module's forward on CUDA tensors: the stage's operator (:mod:`fusedlib.ops`), whose
CUDA kernel is the host code in ``fusedlib/kernels/torch_op.cuh`` (argument checks, the GEMM
path's default rule, the output and the stream's scratch, launches, ``num_batches_tracked``
on the device).

Two ways in. A plain eager call (:func:`eager_forward`: no gradient needed, no tracing, no
dispatch mode, the default GEMM path, arguments that pass the checks) goes straight to that C++
function through the stage extension's ``eager_forward``, without the dispatcher and without
pybind11's per-argument casts; Python adds one dictionary lookup. Every other call (:func:`stage_forward`: a gradient is
needed, ``$FUSEDLIB_GEMM_PATH`` forces a path, a precision the GPU lacks, an argument to reject)
goes through ``torch.ops.fusedlib.<stage>``, whose Autograd kernel gives the derived backward
and whose checks raise the errors.

Nothing derived from a parameter or buffer is kept between calls, so no write can leave stale
state behind, however it is made (an optimizer with ``fused=True`` and writes through ``.data``
leave the version counter as it was; ``torch.func.functional_call`` hands in other tensors):
3xTF32 splits W into its TF32 parts inside the GEMM from W as it is at each call, and the
eval-mode coefficients are recomputed in the GEMM's epilogue at each call.
"""
from __future__ import annotations

import functools

import torch

from . import algebra, engine, ops
from .build import load_backward, load_stage


@functools.lru_cache(maxsize=None)
def _capability(dev: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(dev)


@functools.lru_cache(maxsize=256)
def _path(precision: str, dev: torch.device, k: int, aligned: bool, forced: str, sixteen_bit: bool) -> str:
    return engine.select_path(precision, _capability(dev), k, aligned, forced, sixteen_bit)


def gemm_path(precision: str, dev: torch.device, k: int, x: torch.Tensor | None = None,
              weight: torch.Tensor | None = None) -> str:
    """The GEMM path (``simt``, ``mma`` or ``wgmma``) a forward at ``precision`` takes on
    ``dev`` for in_features ``k`` (and, when given, these operands' alignment and dtype: bf16/fp16
    operands run the 16-bit kernels), honouring ``$FUSEDLIB_GEMM_PATH``. Raises
    :class:`fusedlib.engine.UnsupportedPrecision` when the GPU (or the forced path) cannot run
    it, ValueError for a bad switch value."""
    sixteen_bit = x is not None and x.dtype in algebra.LOW_PRECISION
    aligned = sixteen_bit or all(t is None or t.data_ptr() % 16 == 0 for t in (x, weight))
    return _path(precision, dev, k, aligned, engine.forced_path(), sixteen_bit)


def sixteen_bit_kernels(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a forward of bf16/fp16 ``x`` (N, K) and ``weight`` (M, K), both CUDA tensors, runs
    the 16-bit tensor-core kernels (:func:`fusedlib.engine.sixteen_bit_kernels`: compute
    capability 8.0 or later, K % 8 == 0, and the two in one dtype; False off CUDA); else the modules convert them
    to float32 (docs/design.md §15). Reads no address (a FakeTensor under torch.compile has none)."""
    return (x.is_cuda and x.dtype in algebra.LOW_PRECISION and weight.dtype == x.dtype
            and engine.sixteen_bit_kernels(_capability(x.device), x.shape[1]))


def eager_forward(module, x: torch.Tensor, tensors: tuple, eps: float, momentum: float | None,
                  precision: str | None = None) -> torch.Tensor | None:
    """A fused module's forward on CUDA as a plain eager call, or None where it must go
    through the operator (:func:`stage_forward`).

    Args:
        module: the fused module (its stage, precision, kind and train/eval mode).
        x: (N, in_features) on a CUDA device. tensors: the module's (gemm.weight, gemm.bias,
            scale, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.num_batches_tracked).
        eps, momentum: BatchNorm's.
        precision: the GEMM's precision, where it is not the module's (None): a 16-bit module's
            converted operands (:func:`fusedlib.engine.widened_precision`).

    Returns:
        Y (N, out_features) from the stage's kernels on the device's default GEMM path: float32
        for float32 x and gemm.weight; for bf16 or fp16 x and gemm.weight (the 16-bit kernels),
        in x's dtype when the vectors are in it too (a module ``.to(dtype)``: the kernels read
        them where they lie, each element widened as it is read, and write the running buffers
        back in their dtype),
        float32 when they are float32 already; under ``torch.autocast`` to bf16/fp16, what the operators'
        autocast rule gives (the rule applied in C++). A 16-bit call in train mode that needs a
        gradient (grad mode on, x or a parameter requiring grad) returns Y with a C++ autograd
        node whose backward is one C++ call (the same kernels and gradients as the operator's
        way, without its Python calls).
        None when any other call needs a gradient, a dispatch mode or tensor subclass is active,
        ``$FUSEDLIB_GEMM_PATH`` forces a path, or an argument fails the operator's checks (the
        C++ side decides: ``fusedlib/kernels/torch_op.cuh``).

    Raises:
        fusedlib.build.KernelBuildError: the stage's kernels could not be built.
    """
    fn = load_stage(module._stage, x.get_device()).eager_forward  # cached per (stage, device)
    training = module._modules["bn"].training  # (BatchNorm's mode: modules.check_submodules)
    if (training and torch.is_grad_enabled()
            and (x.dtype in algebra.LOW_PRECISION or torch.is_autocast_enabled("cuda"))):
        load_backward(x.get_device())  # (the 16-bit train forward's autograd node calls its backward_sixteen)
    return fn(x, *tensors, module._kind, precision or module._precision, training, eps, momentum)


def stage_forward(module, args: tuple) -> torch.Tensor:
    """Forward of a fused module on CUDA tensors through the operator: every call that
    :func:`eager_forward` declines. ``args``: the operator's arguments without ``gemm_path``
    (x (N, K), the module's 8 tensors, kind, precision, …), validated by the caller. Returns (N, M) float32,
    differentiable through the operator's Autograd kernel when a gradient is needed.

    Raises:
        TypeError: x is not float32, or bf16/fp16 that :func:`sixteen_bit_kernels` accepts with
            the weight (the kernels take float32 or 16-bit operands, and give float32), outside
            autocast (under it the operator's autocast rule casts them).
        fusedlib.engine.UnsupportedPrecision: no GEMM path of this GPU runs the precision
            (tf32/3xtf32 below compute capability 8.0), or the path forced by
            ``$FUSEDLIB_GEMM_PATH`` cannot run it here.
        ValueError: ``$FUSEDLIB_GEMM_PATH`` holds something else than auto, simt, mma or wgmma.
        fusedlib.build.KernelBuildError: the stage's kernels could not be built.
    """
    x, weight = args[0], args[1]
    if x.dtype != torch.float32 and not sixteen_bit_kernels(x, weight) and not torch.is_autocast_enabled("cuda"):
        raise TypeError(f"x: the CUDA kernels take float32, or bf16/fp16 with a weight of the same dtype at "
                        f"in_features % 8 == 0 on compute capability 8.0 or later; got x {x.dtype}, weight "
                        f"{weight.dtype}, in_features {x.shape[1]}")
    precision = args[ops._PRECISION]  # (the module's, or a 16-bit module's widened_precision)
    path = gemm_path(precision, x.device, x.shape[1], x, weight)
    load_stage(module._stage, x.get_device())  # registers the operator's CUDA kernel
    return ops.OPS[module._stage](*args, path)


@ops.train_backward.register_kernel("cuda")
def _train_backward_cuda(dy, y, z, x, weight, scale, gamma, beta, kind, precision, eps, need_dx=True, stats=None,
                         group_name=None):
    """The CUDA kernel of ``torch.ops.fusedlib.train_backward`` (schema and CPU kernel in
    :mod:`fusedlib.ops`): the backward extension's fused passes, then the two GEMMs
    (:func:`fusedlib.ops.backward_gemms`). Registered here, beside the forward's use of the
    build, so that :mod:`fusedlib.ops` does not import :mod:`fusedlib.build` (which imports it).
    With ``group_name`` (data parallelism, docs/design.md §14) the same passes in two phases
    around one all-reduce of [S1; S2; Σ_i X; N] (2·M + K + 1 floats), about the forward's global
    statistics ``stats``: dZ' from the ranks' totals, dW centred on the global x̄, and dγ, dβ and
    the scale's gradient this rank's part (DistributedDataParallel sums them), as
    :func:`fusedlib.algebra.train_backward_fused` with ``reduce`` specifies.
    x and weight both bf16 or both fp16 (the 16-bit forward's, one process): one C++ call
    (``backward_sixteen``, which spares a 16-bit step the host time of a dozen Python calls): the
    vectors cast to float32 in one cat and one cast, the passes as always, their sums in
    float32, reading dY and Y in the dtype as they come (the vectors in float32) and writing dZ'
    once, rounded to the dtype as eager PyTorch's backward has it; then
    dX = dZ'·W and dW = dZ'ᵀ·X on cuBLAS's 16-bit GEMMs (float32 accumulation, dZ'ᵀ a view), dX
    and dW in the dtype, each vector's gradient cast back to its dtype on its own (an
    operator's returns may not be views of one another); x 16-bit with a float32 weight (the
    autocast route's master weight, whose 16-bit copy the forward read): the same call, dW the
    16-bit GEMM's float32 output (docs/design.md §15);
    other mixes run on float32 values (exact) and return each gradient in its input's dtype
    (docs/design.md §15)."""
    dtypes = (x.dtype, weight.dtype)
    # x 16-bit, weight the same dtype or float32 (autocast's master weight: ops.StageFunction)
    sixteen = (x.dtype in algebra.LOW_PRECISION and weight.dtype in (x.dtype, torch.float32)
               and group_name is None)
    if not sixteen and (x.dtype in algebra.LOW_PRECISION or weight.dtype in algebra.LOW_PRECISION):
        x, weight = x.float(), weight.float()
    ext = load_backward(z.device.index if z.device.index is not None else torch.cuda.current_device())
    split = precision == "3xtf32" and not sixteen
    y_or_z = z if y is None else y
    if sixteen:  # the passes, the GEMMs and the vectors' casts in one C++ call (torch_backward.cuh)
        return tuple(ext.backward_sixteen(dy, y_or_z, z, x, weight, scale, gamma, beta, kind, eps, need_dx))
    dy, y_or_z = dy.float(), y_or_z.float()  # (the float32 GEMMs read float32 dZ')
    z = z.float()  # (a 16-bit Z' where the mix of dtypes sends the step here: the passes widen it exactly)
    if group_name is None:
        dz, dzt, dgamma, dbeta, ds_cols = ext.backward_passes(dy, y_or_z, z, scale, gamma, beta, kind, eps, split)
        x_op = ops.x_operand(ext, x, precision)
    else:  # the two phases and the all-reduce in one C++ call (fusedlib/kernels/torch_backward.cuh)
        dz, dzt, dgamma, dbeta, ds_cols, total = ext.backward_passes_group(
            dy, y_or_z, z, scale, gamma, beta, kind, eps, split, x, stats, group_name)
        x_op = ops.x_operand(ext, x, precision, total=total)
    # dX's W operand; 3xtf32: W's TF32 parts, split from W as it is now (one pass, nothing kept)
    w_operand = weight if precision != "3xtf32" else ext.tf32_parts(weight.contiguous()) if need_dx else None
    dx, dweight = ops.backward_gemms(dz, dzt, x_op, w_operand, precision, need_dx)
    return (dx.to(dtypes[0]), dweight.to(dtypes[1]), torch.zeros_like(dgamma), algebra.scale_gradient(ds_cols, scale),
            dgamma, dbeta)


ops._CUDA_TRAIN_BACKWARD = _train_backward_cuda  # the backward's eager call (ops.train_backward_call)


def _sync_train_cuda(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, stage,
                     kind, precision, eps, momentum, group_name, z_out):
    """The CUDA kernel of ``torch.ops.fusedlib.sync_train`` (schema and CPU kernel in
    :mod:`fusedlib.ops`): the stage's kernels in two phases around one all-gather, on the
    current stream, nothing waiting for the GPU, in one C++ call
    (``fusedlib/kernels/torch_op.cuh`` sync_train, which runs the collectives too). Phase 1: the
    GEMM and this rank's column moments (n, mean, M2, z₀) of the Z the stage holds; the
    all-gather of every rank's (4 × out_features floats each); phase 2: the merge in rank
    order, the coefficients and running buffers, the row pass.

    Under the first-row shift (fp32 and 3xTF32, :func:`fusedlib.algebra.train_gemm`) every rank
    shifts by the same row, rank 0's first, so that the moments share one frame and merge
    exactly: one broadcast of in_features floats before the GEMM, which the other ranks' GEMMs
    take as their shift row (every row of their X shifted, row 0 too: their Z, moments and Y
    are those of their own rows). Returns (Y, stats (2, M): the global mean and biased variance
    of Z).
    """
    group = ops._group(group_name)
    ranks, rank = group.size(), group.rank()  # (torch.distributed's get_* cost the host more)
    if x.shape[0] < 1 or (ranks == 1 and x.shape[0] < 2):
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)} "
                         f"on a process group of {ranks} rank(s) (x: every rank needs a row of its own)")
    ext = load_stage(stage, x.get_device())
    path = gemm_path(precision, x.device, x.shape[1], x, weight)  # ($FUSEDLIB_GEMM_PATH honoured)
    y, stats = ext.sync_train(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked,
                              kind, precision, eps, momentum, path, z_out, group_name, rank, ranks)
    return y, stats


ops._LIB.impl("sync_train", _sync_train_cuda, "CUDA")
ops._CUDA_SYNC_TRAIN = _sync_train_cuda  # the forward's eager call (ops.SyncStageFunction)
