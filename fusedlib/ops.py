"""The stages as PyTorch operators: ``torch.ops.fusedlib.naive``, ``.fold``, ``.sums`` and
``.fused``, registered with :mod:`torch.library`.

Schema (every stage)::

    fusedlib::<stage>(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma,
        Tensor beta, Tensor(a!) running_mean, Tensor(b!) running_var,
        Tensor(c!) num_batches_tracked, str kind, str precision, bool training, float eps,
        float? momentum, str? gemm_path=None, Tensor? weight_split=None) -> Tensor

x (N, K), weight (M, K), bias (M), scale (1) or (M), gamma/beta (bn.weight, bn.bias) and the
running buffers (M): float32 (float64 too on the CPU); num_batches_tracked: int64 scalar;
kind "84" (softmax(s·BN(Z))) or "33" (BN(Z∘s), problems 33 and 39); precision "fp32",
"tf32" or "3xtf32"; returns Y (N, M). In train mode the operator updates running_mean,
running_var and num_batches_tracked in place, as ``nn.BatchNorm1d`` does (the schema
declares the three mutations, so ``torch.compile`` functionalizes them); momentum None is
the cumulative average, computed on the device (no host sync: CUDA-graph capturable).
``gemm_path`` forces the CUDA GEMM path (``simt``, ``mma``, ``wgmma``; None: the device's
default, :func:`fusedlib.engine.select_path`); ``weight_split`` optionally supplies W's
TF32 parts [rna(W); rna(W − rna(W))] (2, M, K) for 3xTF32 on the wgmma path, which
otherwise splits W on every call. The CPU kernel ignores both.

Kernels: CPU, the stage algebra (:func:`fusedlib.algebra.stage_forward`); CUDA, the stage's
kernels (``fusedlib/kernels/torch_op.cuh``, registered when :func:`fusedlib.build.load_stage`
loads the stage's extension); fake (meta), for tracing; Autograd, the derived backward
(:func:`fusedlib.algebra.train_backward`, :func:`~fusedlib.algebra.eval_backward`) through
:class:`StageFunction` whenever a gradient is needed, on both devices. ``torch.library.opcheck``
covers schema, fake tensor, AOT dispatch and autograd registration (tests/test_ops.py and,
on CUDA, tests/test_gpu_operator.py).
"""
from __future__ import annotations

import warnings

import torch

from . import algebra

__all__ = ["OPS", "SCHEMA", "StageFunction", "needs_grad", "stage_op"]

SCHEMA = ("(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma, Tensor beta, "
          "Tensor(a!) running_mean, Tensor(b!) running_var, Tensor(c!) num_batches_tracked, str kind, "
          "str precision, bool training, float eps, float? momentum, str? gemm_path=None, "
          "Tensor? weight_split=None) -> Tensor")
_LIB = torch.library.Library("fusedlib", "DEF")
_DIFFERENTIABLE = 6  # x, weight, bias, scale, gamma, beta


def needs_grad(args) -> bool:
    """Whether a call with the operator's arguments ``args`` (schema order) needs autograd:
    grad mode on and x or a parameter (the first six arguments) requiring grad."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in args[:_DIFFERENTIABLE])


class StageFunction(torch.autograd.Function):
    """The stage's forward (its operator, below autograd) with the derived backward.

    ``apply(op, args)``: ``args`` the operator's arguments in schema order. The running
    buffers travel inside ``args`` (a tuple), out of autograd's sight: they get no gradient,
    as in BatchNorm. Saves Y, x, weight, bias, scale, gamma, beta (+ the running buffers in
    eval mode); the backward recomputes Z' = X Wᵀ at the forward's precision.
    """

    @staticmethod
    def forward(ctx, op, args, x, weight, bias, scale, gamma, beta):
        y = op(x, weight, bias, scale, gamma, beta, *args[_DIFFERENTIABLE:])
        kind, precision, training, eps = args[9:13]
        ctx.kind, ctx.precision, ctx.training, ctx.eps = kind, precision, training, eps
        buffers = () if training else (args[6], args[7])  # eval reads the running buffers
        ctx.save_for_backward(y, x, weight, bias, scale, gamma, beta, *buffers)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, x, weight, bias, scale, gamma, beta, *buffers = ctx.saved_tensors
        # Autograd runs a CUDA backward on a thread of its own, where cuBLAS's first call finds no
        # current CUDA context, warns, and makes the primary context current: the right one.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
            z = algebra.matmul_nt(x, weight, ctx.precision)  # Z' as the forward's GEMM made it
            if ctx.training:
                mean, var = algebra.column_stats_two_pass(z)
                grads = algebra.train_backward(ctx.kind, dy, y, z - mean, var, x, weight, scale, gamma, beta,
                                               ctx.eps)
            else:
                grads = algebra.eval_backward(ctx.kind, dy, y, z + bias, x, weight, scale, gamma, beta,
                                              *buffers, ctx.eps)
        return (None, None, *grads)


def _define(stage: str):
    _LIB.define(stage + SCHEMA)
    op = getattr(torch.ops.fusedlib, stage).default

    def cpu(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, kind, precision,
            training, eps, momentum, gemm_path=None, weight_split=None):
        bn = algebra.BNState(gamma, beta, running_mean, running_var, num_batches_tracked, momentum, eps)
        return algebra.stage_forward(kind, stage, x, weight, bias, scale, bn, training, precision)

    def fake(x, weight, *_):
        return x.new_empty(x.shape[0], weight.shape[0])

    def autograd_kernel(keyset, *args):
        if needs_grad(args):
            return StageFunction.apply(op, args, *args[:_DIFFERENTIABLE])
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIB.impl(stage, cpu, "CPU")
    torch.library.register_fake(f"fusedlib::{stage}", fake, lib=_LIB)
    _LIB.impl(stage, autograd_kernel, "Autograd", with_keyset=True)
    return op


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
