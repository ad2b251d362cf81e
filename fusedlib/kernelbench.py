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

__all__ = ["DTYPES", "TOLERANCE", "gemm_precision", "model_new_source", "evaluate", "add_arguments", "main"]

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


#: KernelBench's tolerance (atol = rtol) per evaluation dtype (its ``get_tolerance_for_precision``).
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2, "fp16": 1e-2}


def _init_inputs(problem: str, shape) -> list:
    """KernelBench's ``get_init_inputs()`` of ``problem`` at ``shape``."""
    if problem == "84":
        return [shape.in_features, shape.out_features, 1e-5, 0.1, (1,)]
    return [shape.in_features, shape.out_features, (shape.out_features,)]


def evaluate(problem: str, dtype: str = "fp32", stage: str = "fused", precision: str | None = None,
             trials: int = 5, seed: int = 42, shape=None, device: str = "cuda") -> dict:
    """KernelBench's correctness check of the ``ModelNew`` that :func:`model_new_source` writes,
    as ``eval_kernel_against_ref(..., num_correct_trials=trials, seed_num=seed, precision=dtype)``
    runs it (KernelBench ``src/kernelbench/eval.py``): both models built under the same seed from
    ``get_init_inputs()``, cast with ``.to(device, dtype)``, left in train mode; ``trials``
    inputs ``torch.rand(N, K)`` from seeds drawn after ``torch.manual_seed(seed)``; a trial passes
    when ``torch.allclose(output, output_new, atol=tol, rtol=tol)`` (:data:`TOLERANCE`). The
    reference is :class:`fusedlib.reference`'s copy of KernelBench's ``Model``. Beside
    KernelBench's own numbers, each trial's normwise relative error of both outputs against
    the reference model run in float64 on the same (cast) parameters and input: whether a
    failing check means the fused module is further from the exact result than eager PyTorch
    in the dtype, or nearer.

    Args:
        problem: "84", "33" or "39". dtype: one of :data:`DTYPES`. stage, precision: of
            ``ModelNew`` (precision None: :func:`gemm_precision`'s choice). shape: a
            :class:`fusedlib.reference.Shape` or preset name (default the problem's KernelBench
            shape). device: "cuda" or "cpu".

    Returns:
        dict with problem, dtype, stage, precision, shape (``NxK->M``), trials, passed_trials,
        passed (every trial), tolerance, and per trial lists max_abs_diff, mean_abs_diff
        (KernelBench's ``max_difference``/``avg_difference``), eager_rel_err, fused_rel_err.

    Raises:
        ValueError: unknown problem, dtype, stage or precision.
    """
    import copy

    import torch

    from . import reference
    problem, precision = str(problem), gemm_precision(dtype, precision)
    namespace: dict = {}
    exec(compile(model_new_source(problem, stage, precision, dtype), f"{problem}_new.py", "exec"), namespace)
    shape = reference.parse_shape(shape or problem)
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    cls = reference.GemmBatchNormScalingSoftmax if problem == "84" else reference.GemmScaleBatchNorm

    def set_seed(s: int) -> None:  # KernelBench's set_seed
        torch.manual_seed(s)
        torch.cuda.manual_seed(s)

    set_seed(seed)
    init = _init_inputs(problem, shape)
    with torch.no_grad():
        set_seed(seed)
        model = cls(*init)
        set_seed(seed)
        model_new = namespace["ModelNew"](*init)
        model, model_new = model.to(device=device, dtype=torch_dtype), model_new.to(device=device, dtype=torch_dtype)
    torch.manual_seed(seed)
    trial_seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(trials)]
    tol = TOLERANCE[dtype]
    out = {"problem": problem, "dtype": dtype, "stage": stage, "precision": precision, "shape": str(shape),
           "trials": trials, "tolerance": tol, "passed_trials": 0, "max_abs_diff": [], "mean_abs_diff": [],
           "eager_rel_err": [], "fused_rel_err": []}
    with torch.no_grad():
        for trial_seed in trial_seeds:
            set_seed(trial_seed)
            x = torch.rand(shape.batch, shape.in_features).to(device=device, dtype=torch_dtype)
            exact = copy.deepcopy(model).double()(x.double())  # before the models' running buffers move
            y, y_new = model(x), model_new(x)
            diff = (y.float() - y_new.float()).abs()
            out["max_abs_diff"].append(diff.max().item())
            out["mean_abs_diff"].append(diff.mean().item())
            for key, got in (("eager_rel_err", y), ("fused_rel_err", y_new)):
                out[key].append(((got.double() - exact).norm() / exact.norm()).item())
            out["passed_trials"] += bool(torch.allclose(y, y_new, atol=tol, rtol=tol))
    out["passed"] = out["passed_trials"] == trials
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m fusedlib kernelbench`` (problem, stage, precision, dtype, the
    output file, and ``--evaluate`` with its shape), added to the sub-command's parser ``p``."""
    p.add_argument("--problem", required=True, choices=list(_PROBLEMS), help="KernelBench level-2 problem id")
    p.add_argument("--stage", default="fused", choices=list(algebra.STAGES))
    p.add_argument("--precision", choices=list(algebra.PRECISIONS),
                   help="the GEMM's precision (default fp32; tf32 with --dtype bf16 or fp16, exact for 16-bit operands)")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES),
                   help="KernelBench's evaluation dtype, its precision= argument (default fp32)")
    p.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    p.add_argument("--evaluate", action="store_true",
                   help="instead of writing the file, run KernelBench's correctness check of it here "
                        "(5 trials at the problem's KernelBench shape, on CUDA where available)")
    p.add_argument("--shape", help="with --evaluate: another shape, NxK:M or a preset (default the problem's)")


def main(args) -> int:
    """Write the ``ModelNew`` source (exit status 0); with ``--evaluate``, run
    :func:`evaluate` and print each trial (exit status 0 if every trial passed, else 1)."""
    if args.evaluate:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        r = evaluate(args.problem, args.dtype, args.stage, args.precision, shape=args.shape, device=device)
        print(f"KernelBench's check, problem {r['problem']} at {r['shape']}, {r['dtype']} "
              f"(atol = rtol = {r['tolerance']:g}), ModelNew = {r['stage']} at {r['precision']}, {device}:")
        for i in range(r["trials"]):
            print(f"  trial {i}: max |diff| {r['max_abs_diff'][i]:.2e}, mean {r['mean_abs_diff'][i]:.2e}; "
                  f"error against float64: eager {r['eager_rel_err'][i]:.2e}, fused {r['fused_rel_err'][i]:.2e}")
        print(f"passed {r['passed_trials']} of {r['trials']} trials")
        return 0 if r["passed"] else 1
    src = model_new_source(args.problem, args.stage, args.precision, args.dtype)
    if args.output:
        args.output.write_text(src)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(src)
    return 0
