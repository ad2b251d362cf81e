"""A fused module's forward on CUDA tensors: the stage's operator (:mod:`fusedlib.ops`), whose
CUDA kernel is the host code in ``fusedlib/kernels/torch_op.cuh`` (argument checks, the GEMM
path's default rule, the output and the stream's scratch, launches, ``num_batches_tracked``
on the device).

Two ways in. A plain eager call (:func:`eager_forward`: no gradient needed, no tracing, no
dispatch mode, the default GEMM path, arguments that pass the checks) goes straight to that C++
function through the stage extension's ``eager_forward``, without the dispatcher and without
pybind11's per-argument casts; Python adds one dictionary lookup and, for 3xtf32, the cached
TF32 split of W (:func:`weight_split`). Every other call (:func:`stage_forward`: a gradient is
needed, ``$FUSEDLIB_GEMM_PATH`` forces a path, a precision the GPU lacks, an argument to reject)
goes through ``torch.ops.fusedlib.<stage>``, whose Autograd kernel gives the derived backward
and whose checks raise the errors. Nothing caches a folded copy of W: the eval-mode
coefficients are recomputed every call in the GEMM's epilogue, so writes through ``.data``
are seen at once.
"""
from __future__ import annotations

import functools

import torch

from . import algebra, engine, ops
from .build import load_stage


@functools.lru_cache(maxsize=None)
def _capability(dev: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(dev)


@functools.lru_cache(maxsize=256)
def _path(precision: str, dev: torch.device, k: int, aligned: bool, forced: str) -> str:
    return engine.select_path(precision, _capability(dev), k, aligned, forced)


def gemm_path(precision: str, dev: torch.device, k: int, x: torch.Tensor | None = None,
              weight: torch.Tensor | None = None) -> str:
    """The GEMM path (``simt``, ``mma`` or ``wgmma``) a forward at ``precision`` takes on
    ``dev`` for in_features ``k`` (and, when given, these operands' alignment), honouring
    ``$FUSEDLIB_GEMM_PATH``. Raises :class:`fusedlib.engine.UnsupportedPrecision` when the
    GPU (or the forced path) cannot run it, ValueError for a bad switch value."""
    aligned = all(t is None or t.data_ptr() % 16 == 0 for t in (x, weight))
    return _path(precision, dev, k, aligned, engine.forced_path())


def _split_key(weight: torch.Tensor) -> tuple:
    """What the cached split of W is keyed on: storage, version counter, shape."""
    return weight.data_ptr(), weight._version, weight.shape


def weight_split(module, weight: torch.Tensor, precision: str, path: str) -> torch.Tensor | None:
    """[Wb; Ws] (2, M, K), W's TF32 parts for 3xTF32 on the wgmma path (Wb = rna(W),
    Ws = rna(W − Wb)), cached on the module and keyed on the weight's storage, version and
    shape; None for other precisions and paths. A CUDA graph being captured never makes one
    (the captured kernels would run only at replay) and the kernels ignore a given one then
    (the graph splits W itself on every replay, so that optimizer steps between replays are
    seen). Writes through ``.data`` bypass the version counter: call
    ``module.invalidate_caches()`` after them."""
    if precision != "3xtf32" or path != "wgmma":
        return None
    key = _split_key(weight)
    cache = module._split_cache
    if cache is None or cache[0] != key:
        if weight.is_cuda and torch.cuda.is_current_stream_capturing():
            return None
        with torch.no_grad():
            split = torch.stack(algebra.tf32_split(weight)).contiguous()
        cache = module._split_cache = (key, split)
    return cache[1]


def eager_forward(module, x: torch.Tensor, tensors: tuple, eps: float, momentum: float | None
                  ) -> torch.Tensor | None:
    """A fused module's forward on CUDA as a plain eager call, or None where it must go
    through the operator (:func:`stage_forward`).

    Args:
        module: the fused module (its stage, precision, kind and train/eval mode).
        x: (N, in_features) on a CUDA device. tensors: the module's (gemm.weight, gemm.bias,
            scale, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.num_batches_tracked).
        eps, momentum: BatchNorm's.

    Returns:
        Y (N, out_features) float32 from the stage's kernels on the device's default GEMM
        path; None when grad mode is on and x or a parameter requires grad, a dispatch mode
        or tensor subclass is active, ``$FUSEDLIB_GEMM_PATH`` forces a path, or an argument
        fails the operator's checks (the C++ side decides: ``fusedlib/kernels/torch_op.cuh``).

    Raises:
        fusedlib.build.KernelBuildError: the stage's kernels could not be built.
        fusedlib.engine.UnsupportedPrecision, ValueError: as :func:`gemm_path`, when a 3xtf32
            call finds no current W split and asks for the path (the operator's way would
            raise the same).
    """
    fn = load_stage(module._stage, x.get_device()).eager_forward  # cached per (stage, device)
    precision = module._precision
    split = _eager_split(module, tensors[0], x) if precision == "3xtf32" else None
    return fn(x, *tensors, module._kind, precision, module.training, eps, momentum, split)


def _eager_split(module, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """:func:`weight_split` for an eager 3xtf32 call: the cached split when it is current
    (checked first, without the path rule: the common case), else :func:`weight_split` on the
    path this call takes (:func:`gemm_path`)."""
    cache = module._split_cache
    if cache is not None and cache[0] == _split_key(weight):
        return cache[1]
    return weight_split(module, weight, "3xtf32", gemm_path("3xtf32", x.device, weight.shape[1], x, weight))


def stage_forward(module, args: tuple) -> torch.Tensor:
    """Forward of a fused module on CUDA tensors through the operator: every call that
    :func:`eager_forward` declines. ``args``: the operator's arguments without ``gemm_path``
    and ``weight_split``, x (N, K) first, validated by the caller. Returns (N, M) float32,
    differentiable through the operator's Autograd kernel when a gradient is needed.

    Raises:
        TypeError: x is not float32 (the kernels are fp32 in and out).
        fusedlib.engine.UnsupportedPrecision: no GEMM path of this GPU runs the precision
            (tf32/3xtf32 below compute capability 8.0), or the path forced by
            ``$FUSEDLIB_GEMM_PATH`` cannot run it here.
        ValueError: ``$FUSEDLIB_GEMM_PATH`` holds something else than auto, simt, mma or wgmma.
        fusedlib.build.KernelBuildError: the stage's kernels could not be built.
    """
    x, weight = args[0], args[1]
    if x.dtype != torch.float32:
        raise TypeError(f"x: the CUDA kernels take float32, got {x.dtype}")
    precision = module._precision
    path = gemm_path(precision, x.device, x.shape[1], x, weight)
    load_stage(module._stage, x.get_device())  # registers the operator's CUDA kernel
    return ops.OPS[module._stage](*args, path, weight_split(module, weight, precision, path))
