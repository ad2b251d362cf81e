"""The stages as PyTorch operators: ``torch.ops.fusedlib.naive``, ``.fold``, ``.sums`` and
``.fused``, registered with :mod:`torch.library` (custom ops, PyTorch 2.4 and later).

Each operator takes tensors and plain values only and is functional (PyTorch registers a
backward only on operators that mutate nothing): it returns the output and the BatchNorm
buffers as this forward leaves them (``running_mean``, ``running_var``,
``num_batches_tracked``: updated in train mode, as given in eval mode), which the module
copies into its buffers. It has a fake (meta) implementation for tracing
(``torch.compile``, FakeTensor) and its backward registered
(``torch.library.register_autograd``): the derived gradients of
:func:`fusedlib.algebra.train_backward` (batch statistics) and
:func:`fusedlib.algebra.eval_backward` (running statistics). Implemented for CPU tensors
here, by the stage algebra :func:`fusedlib.algebra.stage_forward`; CUDA tensors go through
the modules' kernel path (:mod:`fusedlib.cuda`).

Schema (every stage)::

    fusedlib::<stage>(Tensor x, Tensor weight, Tensor bias, Tensor scale, Tensor gamma,
        Tensor beta, Tensor running_mean, Tensor running_var, Tensor num_batches_tracked,
        str kind, str precision, bool training, float eps, float? momentum)
        -> (Tensor y, Tensor running_mean, Tensor running_var, Tensor num_batches_tracked)

x (N, K), weight (M, K), bias (M), scale (1) or (M), gamma/beta and the running buffers (M):
float32 or float64; num_batches_tracked: int64 scalar; kind "84" or "33"; y is (N, M).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import algebra

__all__ = ["OPS", "stage_op"]

def _define(stage: str):
    name = f"fusedlib::{stage}"

    @torch.library.custom_op(name, mutates_args=(), device_types="cpu")
    def op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor, gamma: torch.Tensor,
           beta: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
           num_batches_tracked: torch.Tensor, kind: str, precision: str, training: bool, eps: float,
           momentum: Optional[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        bn = algebra.BNState(gamma, beta, running_mean.clone(), running_var.clone(), num_batches_tracked.clone(),
                             momentum, eps)
        y = algebra.stage_forward(kind, stage, x, weight, bias, scale, bn, training, precision)
        return y, bn.running_mean, bn.running_var, bn.num_batches_tracked

    @op.register_fake
    def _(x, weight, bias, scale, gamma, beta, running_mean, running_var, num_batches_tracked, kind, precision,
          training, eps, momentum):
        return (x.new_empty(x.shape[0], weight.shape[0]), torch.empty_like(running_mean),
                torch.empty_like(running_var), torch.empty_like(num_batches_tracked))

    def setup_context(ctx, inputs, output):
        x, weight, bias, scale, gamma, beta, running_mean, running_var, _, kind, precision, training, eps, _ = inputs
        ctx.kind, ctx.precision, ctx.training, ctx.eps = kind, precision, training, eps
        ctx.mark_non_differentiable(*output[1:])  # buffers: no gradient flows through them (as in BatchNorm)
        # eval mode reads the running buffers (this output returns them unchanged); train mode needs none
        buffers = () if training else (output[1], output[2])
        ctx.save_for_backward(output[0], x, weight, bias, scale, gamma, beta, *buffers)

    def backward(ctx, dy, *_buffer_grads):
        y, x, weight, bias, scale, gamma, beta, *buffers = ctx.saved_tensors
        with torch.no_grad():
            z = algebra.matmul_nt(x, weight, ctx.precision)  # Z' as the forward's GEMM made it
            if ctx.training:
                mean, var = algebra.column_stats_two_pass(z)
                grads = algebra.train_backward(ctx.kind, dy, y, z - mean, var, x, weight, scale, gamma, beta,
                                               ctx.eps)
            else:
                grads = algebra.eval_backward(ctx.kind, dy, y, z + bias, x, weight, scale, gamma, beta,
                                              *buffers, ctx.eps)
        return (*grads, None, None, None, None, None, None, None, None)

    op.register_autograd(backward, setup_context=setup_context)
    return op


#: stage -> its operator (a ``torch.library.custom_op``; ``torch.ops.fusedlib.<stage>`` too).
OPS = {stage: _define(stage) for stage in algebra.STAGES}


def stage_op(stage: str):
    """The operator of ``stage`` (``torch.ops.fusedlib.<stage>``).

    Raises:
        ValueError: unknown stage.
    """
    if stage not in OPS:
        raise ValueError(f"stage: expected one of {algebra.STAGES}, got {stage!r}")
    return OPS[stage]
