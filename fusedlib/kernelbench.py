"""KernelBench interop: a ``ModelNew`` source for KernelBench's own evaluation.

KernelBench (Ouyang et al. 2025, github.com/ScalingIntelligence/KernelBench) evaluates a
source file that defines ``class ModelNew`` with the constructor signature of the problem's
``Model``: it seeds, builds ``Model(*get_init_inputs())``, seeds again, builds
``ModelNew(*get_init_inputs())`` and compares outputs (fp32: atol = rtol = 1e-4) and times.
:func:`model_new_source` writes such a file for a problem, stage and precision: ``ModelNew``
subclasses the fused module with the upstream signature, so the same seed gives the same
parameters (creation order as upstream) and ``load_state_dict`` works both ways; like
``Model`` it is differentiable (KernelBench times the forward with grad mode on).

Which precision passes KernelBench's fp32 tolerance (results/h200/validation.json,
allclose at 1e-4 against PyTorch's fp32 module): fp32 and 3xtf32 on every problem; tf32
on problem 84 in most cases (38 of 42 at 1024×8192→8192) and never on 33/39 (TF32
operands give ≈ 1e-3 relative error in Z, which BatchNorm's output keeps).

``python -m fusedlib kernelbench --problem 84 --stage fused --precision tf32 -o 84_new.py``
writes the file; then, in a KernelBench checkout with fusedlib installed in its environment,
``python3 scripts/run_and_check.py ref_origin=kernelbench level=2 problem_id=84
kernel_src_path=84_new.py eval_mode=local gpu_arch='["Hopper"]'``.

KernelBench's bf16 and fp16 evaluation (its ``precision`` argument: both models and the inputs
cast with ``.to(dtype)``, atol = rtol = 1e-2): ``--dtype bf16`` or ``--dtype fp16`` names the
dtype in the file and, unless ``--precision`` is given, takes the GEMM precision ``tf32``,
which multiplies 16-bit operands exactly (docs/design.md §15) and is the fastest. Problem 84
passes in both dtypes and 33/39 in fp16; 33/39 in bf16 do not (eager bf16 rounds Z∘s to bf16
before BatchNorm, the fused module does not: §15; ``lab/experiments/bf16_tolerance.py`` shows the
check rejects valid bf16 implementations of that model too).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import algebra

__all__ = ["DTYPES", "gemm_precision", "model_new_source", "add_arguments", "main"]

#: KernelBench's evaluation dtypes (its ``precision`` argument), as its scripts name them.
DTYPES = ("fp32", "bf16", "fp16")


def gemm_precision(dtype: str, precision: str | None = None) -> str:
    """The GEMM precision a fused module in ``dtype`` (one of :data:`DTYPES`) is built with:
    ``precision`` when given, else fp32 for fp32 and tf32 for bf16 and fp16 — a bf16 or fp16
    value is a TF32 value, so every precision multiplies 16-bit operands exactly
    (docs/design.md §15), and tf32 is the fastest. The benchmark harness builds its 16-bit
    stages with this rule too (:func:`fusedlib.lab.bench.build_impl`).

    Raises:
        ValueError: unknown dtype.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
    return precision or ("fp32" if dtype == "fp32" else "tf32")

#: KernelBench file of each problem id, and the fused class and constructor signature of its Model.
_PROBLEMS = {
    "84": ("84_Gemm_BatchNorm_Scaling_Softmax", "FusedGemmBatchNormScalingSoftmax",
           "in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,)",
           "in_features, out_features, bn_eps, bn_momentum, scale_shape"),
    "33": ("33_Gemm_Scale_BatchNorm", "FusedGemmScaleBatchNorm",
           "in_features, out_features, scale_shape, eps=1e-5, momentum=0.1",
           "in_features, out_features, scale_shape, eps, momentum"),
    "39": ("39_Gemm_Scale_BatchNorm", "FusedGemmScaleBatchNorm",
           "in_features, out_features, scale_shape, eps=1e-5, momentum=0.1",
           "in_features, out_features, scale_shape, eps, momentum"),
}


def model_new_source(problem: str, stage: str = "fused", precision: str | None = None, dtype: str = "fp32") -> str:
    """Python source defining KernelBench's ``ModelNew`` for ``problem`` ("84", "33" or
    "39") as fusedlib's ``stage`` at GEMM ``precision``, for KernelBench's evaluation in
    ``dtype`` (one of :data:`DTYPES`; bf16 and fp16 are named in the file's docstring with the
    evaluation's ``precision=`` argument: the module itself takes any dtype). ``precision``
    None: fp32 for an fp32 evaluation, tf32 for bf16 and fp16 (exact for 16-bit operands).

    Returns:
        the source text (imports torch and fusedlib; defines ``ModelNew`` only, as
        KernelBench expects: ``get_inputs``/``get_init_inputs`` come from the reference file).

    Raises:
        ValueError: unknown problem, stage, precision or dtype.
    """
    problem = str(problem)
    if problem not in _PROBLEMS:
        raise ValueError(f"problem: expected one of {tuple(_PROBLEMS)}, got {problem!r}")
    precision = gemm_precision(dtype, precision)
    algebra.check_stage_precision(stage, precision)
    upstream, cls, signature, args = _PROBLEMS[problem]
    evaluation = "" if dtype == "fp32" else (
        f"\nFor KernelBench's {dtype} evaluation (precision={dtype}: both models and the inputs cast to\n"
        f"{dtype}); the GEMM multiplies {dtype} operands exactly at every precision.")
    return f'''"""KernelBench level 2 problem {problem} ({upstream}.py) as fusedlib's {stage!r} stage, {precision}.

Written by `python -m fusedlib kernelbench`; needs fusedlib installed (CUDA kernels built on
first use, for the GPU in use). Same constructor and parameters as the reference Model.{evaluation}
"""
from fusedlib.modules import {cls}


class ModelNew({cls}):
    def __init__(self, {signature}):
        super().__init__({args}, stage={stage!r}, precision={precision!r})
'''


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", required=True, choices=list(_PROBLEMS), help="KernelBench level-2 problem id")
    p.add_argument("--stage", default="fused", choices=list(algebra.STAGES))
    p.add_argument("--precision", choices=list(algebra.PRECISIONS),
                   help="the GEMM's precision (default fp32; tf32 with --dtype bf16 or fp16, exact for 16-bit operands)")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES),
                   help="KernelBench's evaluation dtype, its precision= argument (default fp32)")
    p.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")


def main(args) -> int:
    """Write the ``ModelNew`` source (exit status 0)."""
    src = model_new_source(args.problem, args.stage, args.precision, args.dtype)
    if args.output:
        args.output.write_text(src)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(src)
    return 0
