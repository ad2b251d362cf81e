"""The KernelBench level-2 reference models and their shape presets.

The two classes reproduce the upstream files exactly (constructor signatures, attribute
names, parameter creation order, forward), so that the same ``torch.manual_seed`` gives
bit-identical parameters:

* ``KernelBench/level2/84_Gemm_BatchNorm_Scaling_Softmax.py`` -> :class:`GemmBatchNormScalingSoftmax`
* ``KernelBench/level2/33_Gemm_Scale_BatchNorm.py`` and ``39_Gemm_Scale_BatchNorm.py``
  (same code, other shapes) -> :class:`GemmScaleBatchNorm`
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GemmBatchNormScalingSoftmax",
    "GemmScaleBatchNorm",
    "functional_forward",
    "Shape",
    "PRESETS",
    "PROBLEMS",
    "parse_shape",
    "preset_of",
    "presets_of",
    "problem_kind",
    "make_reference",
    "get_inputs",
]


class GemmBatchNormScalingSoftmax(nn.Module):
    """KernelBench level 2 problem 84: ``softmax_dim1(scale * BatchNorm1d(Linear(x)))``.

    Args:
        in_features: K, columns of the input.
        out_features: M, columns of the output.
        bn_eps: BatchNorm ε added to the variance.
        bn_momentum: BatchNorm running-statistics momentum (``None``: cumulative average).
        scale_shape: shape of the scale parameter, ``(1,)`` upstream (initialised to ones).

    Input ``(N, K)`` float tensor, output ``(N, M)``; rows sum to one.
    """

    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,)):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.gemm(x)
        x = self.bn(x)
        x = self.scale * x
        x = self.softmax(x)
        return x


class GemmScaleBatchNorm(nn.Module):
    """KernelBench level 2 problems 33 and 39: ``BatchNorm1d(Linear(x) * scale)``.

    Args:
        in_features: K, columns of the input.
        out_features: M, columns of the output.
        scale_shape: shape of the per-column scale, ``(out_features,)`` upstream
            (initialised with ``torch.randn``).
        eps: BatchNorm ε.
        momentum: BatchNorm running-statistics momentum (``None``: cumulative average).

    Input ``(N, K)`` float tensor, output ``(N, M)``.
    """

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale
        x = self.bn(x)
        return x


def functional_forward(kind: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       scale: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                       running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                       eps: float) -> torch.Tensor:
    """The reference models' forward as a function of their tensors, in PyTorch's own
    differentiable operators (``F.linear``, ``F.batch_norm``, ``torch.softmax``), in the order of
    :class:`GemmBatchNormScalingSoftmax` (kind "84") and :class:`GemmScaleBatchNorm` ("33").

    Args:
        kind: "84" (softmax(s·BN(XWᵀ + b)), dim 1) or "33" (BN((XWᵀ + b)∘s)).
        x: (N, K). weight: (M, K). bias: (M) or None. scale: (1) ("84") or (M) ("33").
        gamma, beta: bn.weight and bn.bias (M).
        running_mean, running_var: (M), read in eval mode; in train mode the batch statistics
            are used and these are neither read nor written (None is allowed there).
        training: batch statistics (True) or the running buffers (False).
        eps: BatchNorm's ε.

    Returns:
        Y (N, M) in the inputs' dtype, with autograd's graph to every input that requires a
        gradient (any order: fusedlib's stages use it for a backward that is itself
        differentiated, :class:`fusedlib.ops.StageFunction`).
    """
    if training:  # batch statistics: no running buffer enters (nor is updated)
        running_mean = running_var = None
    z = F.linear(x, weight, bias)
    if kind == "84":
        u = F.batch_norm(z, running_mean, running_var, gamma, beta, training, 0.0, eps)
        return torch.softmax(scale * u, dim=1)
    return F.batch_norm(z * scale, running_mean, running_var, gamma, beta, training, 0.0, eps)


@dataclass(frozen=True)
class Shape:
    """A problem size: ``batch`` rows N, ``in_features`` K, ``out_features`` M."""

    batch: int
    in_features: int
    out_features: int

    def __str__(self) -> str:
        return f"{self.batch}x{self.in_features}->{self.out_features}"


#: Shape presets: current KernelBench (84, 33, 39) and KernelBench v0 (all problems).
PRESETS = {
    "84": Shape(1024, 8192, 8192),
    "33": Shape(1024, 8192, 8192),
    "39": Shape(16384, 4096, 4096),
    "v0": Shape(128, 1024, 512),
}

#: Problem id -> model family ("84": BN then scalar scale then softmax; "33": vector scale then BN).
PROBLEMS = {"84": "84", "33": "33", "39": "33"}

_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::|->|→|x|X)\s*(\d+)\s*$")


def parse_shape(text: str | Shape) -> Shape:
    """Parse a preset name (``84``, ``33``, ``39``, ``v0``) or ``NxK:M`` (batch N, in_features K,
    out_features M; ``NxK->M``, as :class:`Shape` prints it, is read too, but the shell takes
    an unquoted ``>`` for a redirection) into a :class:`Shape`.

    Raises:
        ValueError: the text is neither a preset nor ``NxK:M`` with positive integers.
    """
    if isinstance(text, Shape):
        return text
    key = str(text).strip()
    if key in PRESETS:
        return PRESETS[key]
    m = _SHAPE_RE.match(key)
    if not m:
        raise ValueError(
            f"shape: expected a preset {sorted(PRESETS)} or 'NxK:M' (e.g. 257x1000:999), got {text!r}")
    n, k, mm = (int(g) for g in m.groups())
    if min(n, k, mm) < 1:
        raise ValueError(f"shape: every dimension must be >= 1, got {text!r}")
    return Shape(n, k, mm)


def preset_of(problem: str | int, batch: int, in_features: int, out_features: int) -> str | None:
    """The preset a measured row's shape is: the problem's own KernelBench shape (its name,
    ``"84"``, ``"33"`` or ``"39"``), ``"v0"`` (KernelBench v0's 128×1024→512, every problem), or
    None (another size, e.g. a sweep's). 84 and 33 share a shape: the problem decides the name."""
    shape = Shape(int(batch), int(in_features), int(out_features))
    if PRESETS.get(str(problem)) == shape:
        return str(problem)
    return "v0" if shape == PRESETS["v0"] else None


def presets_of(rows) -> list[str | None]:
    """:func:`preset_of` of every row of a table with columns ``problem``, ``batch``,
    ``in_features`` and ``out_features`` (a pandas DataFrame such as bench.csv), in row order."""
    return [preset_of(*r) for r in zip(rows["problem"], rows["batch"], rows["in_features"], rows["out_features"])]


def problem_kind(problem: str | int) -> str:
    """Map a problem id (84, 33 or 39) to its model family, ``"84"`` or ``"33"``.

    Raises:
        ValueError: unknown problem id.
    """
    key = str(problem).strip()
    if key not in PROBLEMS:
        raise ValueError(f"problem: expected one of {sorted(PROBLEMS)}, got {problem!r}")
    return PROBLEMS[key]


def make_reference(problem: str | int, in_features: int, out_features: int, seed: int | None = None) -> nn.Module:
    """Build the reference model of ``problem`` exactly as KernelBench's ``get_init_inputs`` does.

    With ``seed``, ``torch.manual_seed(seed)`` is called first so parameters are reproducible.
    Returns a float32 module on the CPU in train mode.
    """
    kind = problem_kind(problem)
    if seed is not None:
        torch.manual_seed(seed)
    if kind == "84":
        return GemmBatchNormScalingSoftmax(in_features, out_features, 1e-5, 0.1, (1,))
    return GemmScaleBatchNorm(in_features, out_features, (out_features,))


def get_inputs(shape: Shape | str, kind: str = "rand", generator: torch.Generator | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Draw an input ``(N, K)`` tensor on the CPU.

    ``kind``: ``"rand"`` (uniform [0, 1), KernelBench's ``get_inputs``), ``"randn"`` (standard
    normal, KernelBench v0), or ``"offset"`` (every row = one shared random vector plus small
    noise, so the columns of X Wᵀ have |mean|/std ≈ 1e3: the cancellation test of docs/design.md §5).

    Raises:
        ValueError: unknown ``kind``.
    """
    shape = parse_shape(shape)
    n, k = shape.batch, shape.in_features
    if kind == "rand":
        return torch.rand(n, k, generator=generator, dtype=dtype)
    if kind == "randn":
        return torch.randn(n, k, generator=generator, dtype=dtype)
    if kind == "offset":
        base = torch.randn(1, k, generator=generator, dtype=torch.float64)
        noise = torch.randn(n, k, generator=generator, dtype=torch.float64)
        return (base + 1e-3 * noise).to(dtype)
    raise ValueError(f"kind: expected 'rand', 'randn' or 'offset', got {kind!r}")
