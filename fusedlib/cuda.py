"""Run a fused module's forward with its stage's CUDA kernels (see :mod:`fusedlib.build`).

The host side picks the GEMM path (:func:`fusedlib.engine.select_path`: the same for every
stage), allocates the workspace (Z, partials, coefficients, tile counters, 3xTF32 split of
X), keeps the eval-mode folded weights W' = diag(a)·W, b' = a∘b + c and W's TF32 split
cached per module (rebuilt when any parameter or buffer changes), increments
``num_batches_tracked`` and launches the stage on the current CUDA stream. The kernels
update running_mean/running_var in place.
"""
from __future__ import annotations

import functools

import torch

from . import algebra, engine
from .build import load_stage

_PRECISION_CODE = {"fp32": 0, "tf32": 1, "3xtf32": 2}
_MIN_TILE = min(algebra.SIMT_TILES)  # smallest GEMM tile of any path: sizes the partials and counters
#: Fill every output and workspace buffer with NaN before each launch (correctness tests:
#: an element the kernels fail to write then shows up as NaN).
POISON = False


def _eval_weights(module, kind: str):
    """(W', b') with BatchNorm and the scale folded in (fuse_linear_bn_eval semantics),
    cached on the module and keyed on every parameter and buffer's storage and version."""
    bn = module.bn
    tensors = (module.gemm.weight, module.gemm.bias, module.scale, bn.weight, bn.bias,
               bn.running_mean, bn.running_var, bn.num_batches_tracked)
    key = tuple((t.data_ptr(), t._version) for t in tensors) + (bn.eps,)
    cache = module._eval_cache
    if cache is None or cache[0] != key:
        with torch.no_grad():
            a, c = algebra.eval_coefficients(kind, module.bn_state(), module.scale, torch.float32)
            w2, b2 = algebra.fold_linear(module.gemm.weight, module.gemm.bias, a, c)
        cache = module._eval_cache = (key, w2.contiguous(), b2.contiguous())
    return cache[1], cache[2]


@functools.lru_cache(maxsize=None)
def _capability(dev: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(dev)


def gemm_path(precision: str, dev: torch.device, k: int, x: torch.Tensor | None = None,
              weight: torch.Tensor | None = None) -> str:
    """The GEMM path (``simt``, ``mma`` or ``wgmma``) a forward at ``precision`` takes on
    ``dev`` for in_features ``k`` (and, when given, these operands' alignment), honouring
    ``$FUSEDLIB_GEMM_PATH``. Raises :class:`fusedlib.engine.UnsupportedPrecision` when the
    GPU (or the forced path) cannot run it, ValueError for a bad switch value."""
    aligned = all(t is None or t.data_ptr() % 16 == 0 for t in (x, weight))
    return engine.select_path(precision, _capability(dev), k, aligned)


def _workspace(module, dev: torch.device, n: int, k: int, m: int, path: str):
    """Z (N, M), tile partials, coefficients (4, M), tile counters and (3xtf32) X's TF32 parts,
    kept on the module between calls of the same shape. The tile counters are zeroed once:
    the last block of each column block resets its counter, so they are zero between calls.
    One workspace per module: calls of one module on several streams at once are not supported."""
    key = (dev, n, k, m, module.precision, path)
    ws = getattr(module, "_workspace", None)
    if ws is None or ws[0] != key:
        f32 = dict(device=dev, dtype=torch.float32)
        tiles = -(-n // _MIN_TILE)
        split = 2 * n * k if path == "wgmma" and module.precision == "3xtf32" else 0
        ws = module._workspace = (key, torch.empty(n, m, **f32), torch.empty(max(2 * tiles * m, 2 * n), **f32),
                                  torch.empty(4 * m, **f32), torch.zeros(-(-m // _MIN_TILE), device=dev, dtype=torch.int32),
                                  torch.empty(split, **f32))
    return ws[1:]


def _tf32_split(module, weight: torch.Tensor) -> torch.Tensor:
    """[Wb; Ws] (2, M, K): W's TF32 parts for the 3xTF32 GEMM (Wb = rna(W), Ws = rna(W − Wb)),
    cached on the module and keyed on the weight's storage and version."""
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))
    cache = getattr(module, "_split_cache", None)
    if cache is None or cache[0] != key:
        with torch.no_grad():
            big = algebra.round_tf32(weight)
            split = torch.stack([big, algebra.round_tf32(weight - big)]).contiguous()
        cache = module._split_cache = (key, split)
    return cache[1]


def stage_forward(module, x: torch.Tensor) -> torch.Tensor:
    """Forward of a fused module on CUDA tensors. x: (N, K) float32 contiguous on the
    module's device (validated by the caller). Returns (N, M) float32. No autograd.

    Raises:
        TypeError: parameters are not float32 (the kernels are fp32 in and out).
        fusedlib.engine.UnsupportedPrecision: no GEMM path of this GPU runs the precision
            (tf32/3xtf32 below compute capability 8.0), or the path forced by
            ``$FUSEDLIB_GEMM_PATH`` cannot run it here.
        fusedlib.build.KernelBuildError: the stage's kernels could not be built.
    """
    kind, stage, training = module._kind, module.stage, module.training
    if x.dtype != torch.float32:
        raise TypeError(f"x: the CUDA kernels take float32, got {x.dtype}")
    bn, gemm = module.bn, module.gemm
    n, k = x.shape
    m = gemm.out_features
    dev = x.device
    with torch.no_grad(), torch.cuda.device(dev):
        weight, bias = gemm.weight, gemm.bias
        if not training and stage in ("sums", "fused"):
            weight, bias = _eval_weights(module, kind)
        path = gemm_path(module.precision, dev, k, x, weight)
        ext = load_stage(stage, dev.index if dev.index is not None else torch.cuda.current_device())
        momentum = 0.0
        if training:
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked.item())
        y = torch.empty(n, m, device=dev, dtype=torch.float32)
        z, part, coef, counters, xsplit = _workspace(module, dev, n, k, m, path)
        if POISON:
            for t in (y, z, part, coef, xsplit):
                t.fill_(float("nan"))
        xsplit_ptr = wsplit_ptr = 0
        if path == "wgmma" and module.precision == "3xtf32":
            xsplit_ptr, wsplit_ptr = xsplit.data_ptr(), _tf32_split(module, weight).data_ptr()
        tensors = (x, weight, bias, module.scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                   y, z, part, coef, counters)
        ints = (n, k, m, int(kind), int(training), _PRECISION_CODE[module.precision], module.scale.numel(),
                engine.PATH_CODE[path])
        ext.forward([t.data_ptr() for t in tensors] + [xsplit_ptr, wsplit_ptr], list(ints), float(bn.eps),
                    float(momentum), torch.cuda.current_stream(dev).cuda_stream)
    return y
