"""A fused module's forward on CUDA tensors: the stage's operator (:mod:`fusedlib.ops`), whose
CUDA kernel is the host code in ``fusedlib/kernels/torch_op.cuh`` (argument checks, the GEMM
path's default rule, the output and the stream's scratch, launches, ``num_batches_tracked``
on the device).

What stays in Python, per call: the route, one cached lookup (the stage's extension, and
whether the GEMM path must be chosen here: for 3xtf32, whose W split is kept per module
(:func:`weight_split`), under ``$FUSEDLIB_GEMM_PATH``, and on GPUs without TF32 tensor cores,
for the error :class:`fusedlib.engine.UnsupportedPrecision`; otherwise the C++ side applies
the same rule, :func:`fusedlib.engine.select_path`). Eager calls that need neither autograd
nor tracing call the extension's ``forward`` directly (the same C++ function, without the
dispatcher's per-call cost); the rest (a gradient is needed, ``torch.compile``, FakeTensor)
go through ``torch.ops.fusedlib.<stage>``, whose Autograd kernel gives the derived backward.
Nothing caches a folded copy of W: the eval-mode coefficients are recomputed every call
in the GEMM's epilogue, so writes through ``.data`` are seen at once.
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


@functools.lru_cache(maxsize=256)
def _route(stage: str, precision: str, dev: torch.device, forced: str):
    """(the stage extension's ``forward``, whether :func:`gemm_path` runs per call) for a call
    at ``precision`` on ``dev`` with the path switch at ``forced`` (:func:`engine.forced_path`)."""
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    in_python = precision == "3xtf32" or forced != "auto" or _capability(dev) < (8, 0)
    return load_stage(stage, index).forward, in_python


def gemm_path(precision: str, dev: torch.device, k: int, x: torch.Tensor | None = None,
              weight: torch.Tensor | None = None) -> str:
    """The GEMM path (``simt``, ``mma`` or ``wgmma``) a forward at ``precision`` takes on
    ``dev`` for in_features ``k`` (and, when given, these operands' alignment), honouring
    ``$FUSEDLIB_GEMM_PATH``. Raises :class:`fusedlib.engine.UnsupportedPrecision` when the
    GPU (or the forced path) cannot run it, ValueError for a bad switch value."""
    aligned = all(t is None or t.data_ptr() % 16 == 0 for t in (x, weight))
    return _path(precision, dev, k, aligned, engine.forced_path())


def weight_split(module, weight: torch.Tensor, precision: str, path: str) -> torch.Tensor | None:
    """[Wb; Ws] (2, M, K), W's TF32 parts for 3xTF32 on the wgmma path (Wb = rna(W),
    Ws = rna(W − Wb)), cached on the module and keyed on the weight's storage, version and
    shape; None for other precisions and paths, and while a CUDA graph is being captured
    (the graph then splits W itself on every replay, so that optimizer steps between
    replays are seen). Writes through ``.data`` bypass the version counter: call
    ``module.invalidate_caches()`` after them."""
    if precision != "3xtf32" or path != "wgmma" or (weight.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))
    cache = module._split_cache
    if cache is None or cache[0] != key:
        with torch.no_grad():
            split = torch.stack(algebra.tf32_split(weight)).contiguous()
        cache = module._split_cache = (key, split)
    return cache[1]


def stage_forward(module, args: tuple) -> torch.Tensor:
    """Forward of a fused module on CUDA tensors. ``args``: the operator's arguments without
    ``gemm_path`` and ``weight_split``, x (N, K) first, validated by the caller. Returns
    (N, M) float32, differentiable through the operator's Autograd kernel when a gradient
    is needed.

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
    forced = engine.forced_path()
    forward, in_python = _route(module._stage, precision, x.device, forced)
    path = split = None  # None: the C++ side's default path
    if in_python:
        path = gemm_path(precision, x.device, x.shape[1], x, weight)
        split = weight_split(module, weight, precision, path)
    if ops.needs_grad(args):
        return ops.OPS[module._stage](*args, path, split)  # through the dispatcher: the autograd kernel
    return forward(*args, path, split, None)
