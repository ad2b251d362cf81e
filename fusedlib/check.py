"""``python -m fusedlib check``: compare stages with a float64 reference.

Each case builds the KernelBench reference model (:func:`fusedlib.reference.make_reference`)
with randomised scale, γ, β and initial running buffers (fresh per seed; problem 33/39 also
gets a zero and a negative scale entry, so the sign and s = 0 paths of the fold are hit),
then runs three modules on the same fresh inputs: the module under test
(:func:`fusedlib.from_reference`: CPU stage algebra or CUDA kernels), PyTorch's own fp32
reference module and a float64 deep copy of it. Train mode: 3 train steps, then the output
of the 3rd step and the running buffers (running_mean, running_var, num_batches_tracked)
are compared with float64. Eval mode: the same 3 train steps, then all three switch to
eval and one eval forward is compared (docs/design.md §5).

Pass rule (per case). Everything finite (NaN or inf never passes), and the normwise
relative error ‖y − y64‖_F / ‖y64‖_F at most ``max(BUDGET[precision], 2·fp32_noise)``:

* ``BUDGET``: fp32 and 3xtf32 1e-5 (fp32-class GEMM: products and sums rounded to 24-bit
  mantissas); tf32 5e-3 (TF32 operands keep 10 mantissa bits, which gives ≈ 1e-3 relative
  error in Z, docs/design.md §4, and up to ≈ 2.3e-3 measured on normalized outputs of the
  smallest shapes).
* ``fp32_noise``: the error of PyTorch's own fp32 module on the same inputs, the larger of
  two equally valid evaluations (K summed in two orders). It only matters for
  ill-conditioned inputs such as ``offset`` (column |mean|/std ≈ 1e3), where even
  PyTorch's fp32 result has errors far above 1e-5.

Running buffers: relative error at most ``max(BUDGET[precision], 1e-5)`` and the same
num_batches_tracked. fp32 and 3xtf32 must also satisfy KernelBench's own check,
``allclose(atol=rtol=1e-4)`` against PyTorch's fp32 module, except on ``offset`` inputs.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys

import torch

from . import algebra
from .reference import PRESETS, get_inputs, make_reference, parse_shape

#: Normwise relative error budgets against float64 (docs/design.md §4), see the module docstring.
BUDGET = {"fp32": 1e-5, "3xtf32": 1e-5, "tf32": 5e-3}
#: Default shapes on the CPU: small and odd (no multiple of any tile), plus KernelBench v0.
CPU_SHAPES = ("7x33->65", "2x64->3", "257x100->99", "v0")
#: Default shapes on CUDA besides the problem's own KernelBench preset. fp32 (the SIMT GEMM,
#: algebra.tile_rows): the presets of 84, 33 and 39 take the 128-row tile; 640x1000->1000 the
#: 64×64 one (5·8 = 40 tiles of 128, 10·16 = 160 ≥ MIN_GRID of 64); v0 (16 tiles of 64) and the
#: odd shapes the 32×32 one. tf32/3xtf32 (tensor cores): 128-row tiles everywhere; on an H100 7x33->65 (K % 4 ≠ 0)
#: runs the mma.sync path, the other shapes the wgmma path (engine.select_path).
CUDA_SHAPES = ("v0", "257x1000->999", "640x1000->1000", "2x64->3", "7x33->65")
INPUT_KINDS = ("rand", "randn", "offset")
#: Gradient cases (:func:`run_grad_case`): small odd shapes, one with K no multiple of 4 (on an
#: H100 the mma.sync path), and v0; inputs rand, randn and offset (cycled over the seeds; tf32
#: never gets offset, as in the forward's cases). Offset inputs (|x̄| ≈ 1e3 against a spread
#: of 1) are where dW = dZ'ᵀX cancels (Σ_i dZ' = 0): PyTorch's own fp32 dW misses by 1e-3 to
#: 3e-2 there; the backward computes dW = dZ'ᵀ(X − x̄) (algebra.train_backward_fused). At a
#: batch of 7 they are ill-conditioned for the other gradients too (the scale's: BatchNorm's
#: Z − μ cancels), where the rule "twice PyTorch's error" compares noise with noise: PyTorch
#: against itself on the same rows permuted fails it in 2 of 30 seeds (84, fp32, CPU).
#: Left out: a batch of 2 (BatchNorm's output then hardly depends on Z: every gradient
#: through it is ε-sized noise).
GRAD_SHAPES = {"cpu": ("7x33->65", "257x100->99", "v0"), "cuda": ("7x33->65", "257x1000->999", "v0")}
GRAD_INPUT_KINDS = ("rand", "randn", "offset")


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def case_model(problem: str, shape, seed: int) -> tuple[torch.nn.Module, torch.Generator]:
    """The reference model of one case: :func:`fusedlib.reference.make_reference` with the
    case's randomised parameters and buffers (all determined by ``seed``):

    * scale: 84 uniform in [0.5, 1.5); 33/39 KernelBench's randn with s_0 = 0 and s_1 < 0
      (when M ≥ 2), the two special paths of the fold;
    * bn.weight γ = 1 + 0.3·randn, bn.bias β = 0.3·randn;
    * running_mean = 0.5·randn, running_var uniform in [0.5, 1.5).

    Returns:
        the float32 CPU model in train mode, and the generator the case's inputs are drawn
        from next.
    """
    sh = parse_shape(shape)
    m = sh.out_features
    gen = torch.Generator().manual_seed(1000 + seed)
    ref = make_reference(problem, sh.in_features, m, seed=seed)
    with torch.no_grad():
        if str(problem) == "84":
            ref.scale.fill_(0.5 + torch.rand(1, generator=gen).item())
        elif m >= 2:
            ref.scale[0] = 0.0
            ref.scale[1] = -abs(ref.scale[1].item()) - 0.1
        ref.bn.weight.copy_(1 + 0.3 * torch.randn(m, generator=gen))
        ref.bn.bias.copy_(0.3 * torch.randn(m, generator=gen))
        # The buffers have a generator of their own, so that the inputs drawn from ``gen``
        # stay those of earlier records with the same seed.
        buf_gen = torch.Generator().manual_seed(2000 + seed)
        ref.bn.running_mean.copy_(0.5 * torch.randn(m, generator=buf_gen))
        ref.bn.running_var.copy_(0.5 + torch.rand(m, generator=buf_gen))
    return ref, gen


def in_k_order(ref: torch.nn.Module, x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """PyTorch's output for ``x`` with the GEMM summed over K in another (equally valid) order:
    a copy of ``ref`` with W's columns and X's columns permuted by ``order``. Call it after the
    forward on ``x``: in train mode the output uses the batch statistics, in eval mode the
    running buffers, which that forward left as they are for this purpose (the copy's own
    forward updates only the copy)."""
    other = copy.deepcopy(ref)
    with torch.no_grad():
        other.gemm.weight.copy_(ref.gemm.weight[:, order])
        return other(x[:, order].contiguous())


def case_budget(precision: str, fp32_noise: float) -> float:
    """The bound on a case's normwise relative error: ``max(BUDGET[precision], 2·fp32_noise)``
    (module docstring)."""
    return max(BUDGET[precision], 2 * fp32_noise)


def _case_modules(problem, stage, mode, precision, shape, seed, device):
    """A case's arguments checked, then (shape, PyTorch's fp32 module on ``device``, the
    case's generator, its float64 copy, the module under test)."""
    algebra.check_stage_precision(stage, precision)
    if mode not in ("train", "eval"):
        raise ValueError(f"mode: expected 'train' or 'eval', got {mode!r}")
    sh = parse_shape(shape)
    ref, gen = case_model(problem, sh, seed)
    ref = ref.to(device)
    from .modules import from_reference
    return sh, ref, gen, copy.deepcopy(ref).double(), from_reference(ref, stage=stage, precision=precision)


def _warmup(sh):
    """The shape of the train steps before a case's forward: the case's, with a batch of at least
    2 (BatchNorm's batch statistics), so that an eval-mode case of one row has running buffers
    to read."""
    return dataclasses.replace(sh, batch=max(sh.batch, 2))


def run_case(problem: str, stage: str, mode: str, precision: str, shape: str, seed: int,
             device: str = "cpu", input_kind: str = "rand") -> dict:
    """Run one case and return its record.

    Args:
        problem: "84", "33" or "39". stage: naive|fold|sums|fused. mode: train|eval.
        precision: fp32|tf32|3xtf32. shape: preset or "NxK->M". seed: int; the
            parameters, buffers and inputs of a case depend on it alone.
        device: "cpu" (stage algebra) or "cuda" (kernels).
        input_kind: rand|randn|offset (see :func:`fusedlib.reference.get_inputs`).

    Returns:
        dict with problem, stage, mode, precision, shape (``"NxK->M"``), seed, input_kind,
        max_abs_err (absolute, output units), rel_err (normwise relative error of the
        output against float64), buffer_rel_err (largest normwise relative error of
        running_mean and running_var), ref_fp32_rel_err (the same for PyTorch's fp32
        module), fp32_noise, budget (the bound rel_err was held to),
        allclose_ref_fp32_1e-4, finite (output and running buffers) and passed (bools).
        Floats are Python floats.

    Raises:
        ValueError: unknown problem/stage/precision/mode/shape.
    """
    sh, ref, gen, ref64, fused = _case_modules(problem, stage, mode, precision, shape, seed, device)
    steps = 3 + (mode == "eval")
    perm = torch.randperm(sh.in_features, generator=gen).to(device)
    for step in range(steps):
        if step == 3:
            for mod in (ref, ref64, fused):
                mod.eval()
        x = get_inputs(sh if step == 3 or mode == "train" else _warmup(sh), input_kind, gen).to(device)
        with torch.no_grad():
            y, y32, y64 = fused(x), ref(x), ref64(x.double())
    bn, bn64 = fused.bn, ref64.bn
    buf_err = max(_relerr(bn.running_mean, bn64.running_mean), _relerr(bn.running_var, bn64.running_var))
    rel, ref_rel = _relerr(y, y64), _relerr(y32, y64)
    noise = max(ref_rel, _relerr(in_k_order(ref, x, perm), y64))
    budget = case_budget(precision, noise)
    finite = all(bool(torch.isfinite(t).all()) for t in (y, bn.running_mean, bn.running_var))
    allclose = bool(torch.allclose(y, y32, atol=1e-4, rtol=1e-4))
    kb_ok = allclose or precision == "tf32" or input_kind == "offset"
    passed = (finite and rel <= budget and kb_ok and buf_err <= max(BUDGET[precision], 1e-5)
              and int(bn.num_batches_tracked) == int(bn64.num_batches_tracked))
    return {"problem": str(problem), "stage": stage, "mode": mode, "precision": precision, "shape": str(sh),
            "seed": seed, "input_kind": input_kind, "max_abs_err": (y.double() - y64).abs().max().item(),
            "rel_err": rel, "buffer_rel_err": buf_err, "ref_fp32_rel_err": ref_rel, "fp32_noise": noise,
            "budget": budget, "allclose_ref_fp32_1e-4": allclose, "finite": finite, "passed": passed}


#: The gradients a case compares, in the order of :func:`run_grad_case`'s ``grad_errs``.
GRAD_NAMES = ("x", "gemm.weight", "gemm.bias", "scale", "bn.weight", "bn.bias")


def run_grad_case(problem: str, stage: str, mode: str, precision: str, shape: str, seed: int,
                  device: str = "cpu", input_kind: str = "rand") -> dict:
    """Run one gradient case (the fused backward, docs/design.md §10) and return its record.

    The case's model (:func:`case_model`: zero and negative scale entries for 33/39) takes
    two train steps without gradients (non-trivial running buffers; eval mode then
    switches), then one forward on fresh inputs ``x`` and a backward of a fresh
    dY = randn(N, M) through the module under test, PyTorch's fp32 module and its float64
    copy. Each gradient (:data:`GRAD_NAMES`) is held to the forward's rule: finite and
    normwise relative error at most ``max(BUDGET[precision], 2·noise)``, noise being
    PyTorch's own error on that gradient at the case's precision (fp32 for fp32 and 3xtf32;
    for tf32 its module with X and W rounded to TF32, what its tensor cores read: the
    scale's gradient, a sum whose terms cancel, carries the forward's TF32 error amplified);
    in train mode the bias's gradient is exactly zero (the bias cancels) and must be a
    tensor, not None.

    Args: as :func:`run_case`.

    Returns:
        dict with problem, stage, mode, precision, shape, seed, input_kind, grad_errs and
        ref_grad_errs (name → normwise relative error against float64), worst_ratio
        (largest error / budget), finite and passed.
    """
    sh, ref, gen, ref64, fused = _case_modules(problem, stage, mode, precision, shape, seed, device)
    peer = ref
    if precision == "tf32":  # PyTorch's module as its TF32 tensor cores run it
        peer = copy.deepcopy(ref)
        with torch.no_grad():
            peer.gemm.weight.copy_(algebra.truncate_tf32(peer.gemm.weight))
    models = (fused, peer, ref64)
    with torch.no_grad():
        for _ in range(2):
            x = get_inputs(_warmup(sh), input_kind, gen).to(device)
            for mod in models:
                mod(x.to(next(mod.parameters()).dtype))
    for mod in models:
        mod.train(mode == "train")
    x = get_inputs(sh, input_kind, gen).to(device)
    dy = torch.randn(sh.batch, sh.out_features, generator=gen).to(device)
    grads = []
    for mod in models:
        dt = next(mod.parameters()).dtype
        xi = (algebra.truncate_tf32(x) if mod is peer and precision == "tf32" else x).to(dt).clone().requires_grad_()
        mod(xi).backward(dy.to(dt))
        params = dict(mod.named_parameters())
        grads.append([xi.grad] + [params[name].grad for name in GRAD_NAMES[1:]])
    errs, ref_errs, ratios, finite, passed = {}, {}, [], True, True
    for name, got, peer, want in zip(GRAD_NAMES, *grads):
        if got is None:
            passed = False
            errs[name] = ref_errs[name] = float("nan")
            continue
        finite = finite and bool(torch.isfinite(got).all())
        if mode == "train" and name == "gemm.bias":
            exact = bool(torch.equal(got, torch.zeros_like(got)))
            errs[name], ref_errs[name] = (0.0 if exact else float("inf")), _relerr(peer, want) if want.norm() else 0.0
            passed = passed and exact
            continue
        errs[name], ref_errs[name] = _relerr(got, want), _relerr(peer, want)
        ratios.append(errs[name] / case_budget(precision, ref_errs[name]))
    worst = max(ratios) if ratios else 0.0
    passed = passed and finite and worst <= 1.0
    return {"problem": str(problem), "stage": stage, "mode": mode, "precision": precision, "shape": str(sh),
            "seed": seed, "input_kind": input_kind, "grad_errs": errs, "ref_grad_errs": ref_errs,
            "worst_ratio": worst, "finite": finite, "passed": passed}


def combos(stages, precisions):
    """(stage, precision) pairs a run covers: every stage at every requested precision,
    stage-major (every stage runs fp32, tf32 and 3xtf32)."""
    for stage in stages:
        for precision in precisions:
            yield stage, precision


def iter_cases(problems, stages, modes, precisions, shapes, seeds, device="cpu", input_kinds=None):
    """Every case of a run, as keyword dicts for :func:`run_case`.

    Args:
        problems, stages, modes, precisions: lists of ids; (stage, precision) pairs follow
            :func:`combos` (every stage at every precision).
        shapes: list of presets or ``"NxK->M"``; None takes the defaults: :data:`CPU_SHAPES`
            on cpu, the problem's KernelBench preset plus :data:`CUDA_SHAPES` on cuda.
        seeds: number of seeds, 0 … seeds−1.
        device: "cpu" or "cuda", passed on.
        input_kinds: list of input kinds cycled over the seeds. None: presets and v0 use
            KernelBench's distribution (rand; randn for v0), other shapes cycle
            rand, randn, offset. tf32 never gets ``offset`` (TF32 operands cannot resolve
            |mean|/std ≈ 1e3).
    """
    for problem in problems:
        plist = shapes or (CPU_SHAPES if device == "cpu" else (problem,) + CUDA_SHAPES)
        for stage, precision in combos(stages, precisions):
            for mode in modes:
                for shape in plist:
                    for seed in range(seeds):
                        if input_kinds:
                            kind = input_kinds[seed % len(input_kinds)]
                        elif shape in PRESETS:
                            kind = "randn" if shape == "v0" else "rand"
                        else:
                            kind = INPUT_KINDS[seed % len(INPUT_KINDS)]
                        if precision == "tf32" and kind == "offset":
                            continue  # TF32 operands cannot resolve |mean|/std ≈ 1e3 (error ≈ 5e-2)
                        yield dict(problem=problem, stage=stage, mode=mode, precision=precision,
                                   shape=str(parse_shape(shape)), seed=seed, input_kind=kind, device=device)


def iter_grad_cases(problems, stages, modes, precisions, shapes=None, seeds: int = 2, device: str = "cpu",
                    input_kinds=None):
    """Every gradient case of a run, as keyword dicts for :func:`run_grad_case`: as
    :func:`iter_cases`, None taking :data:`GRAD_SHAPES` of the device for ``shapes`` and
    :data:`GRAD_INPUT_KINDS` (cycled over the seeds) for ``input_kinds``."""
    return iter_cases(problems, stages, modes, precisions, shapes or GRAD_SHAPES[device], seeds, device,
                      list(input_kinds or GRAD_INPUT_KINDS))


def _choices(value: str, allowed, name: str) -> list[str]:
    if value == "all":
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise ValueError(f"--{name}: expected 'all' or a comma list of {list(allowed)}, got {bad}")
    return items


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m fusedlib check`` (device, problems, stages, modes, precisions,
    shapes, input kinds, seeds, gradients, JSON output), added to the sub-command's parser ``p``."""
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu: stage algebra; cuda: kernels")
    p.add_argument("--problem", default="all", help="84, 33, 39, a comma list or all")
    p.add_argument("--stage", default="all", help="naive, fold, sums, fused, a comma list or all")
    p.add_argument("--mode", default="all", help="train, eval or all")
    p.add_argument("--precision", default="all",
                   help="fp32, tf32, 3xtf32, a comma list or all (every stage runs each)")
    p.add_argument("--shape", action="append", help="preset (84, 33, 39, v0) or NxK:M (batch x in_features : out_features, e.g. 64x256:128); repeatable")
    p.add_argument("--inputs", help="comma list of input kinds cycled over seeds: rand, randn, offset")
    p.add_argument("--seeds", type=int, help="seeds per case (default 2 on cpu, 5 on cuda)")
    p.add_argument("--grad", action="store_true",
                   help="check the gradients (forward + backward) instead of the forward's output")
    p.add_argument("--json", action="store_true", help='print {"cases": [...]} instead of a table')


def format_table(records: list[dict], columns: list[str]) -> str:
    """``records`` as a plain-text table: a header of ``columns``, one line per record,
    columns right-aligned, floats as ``%.2e``."""
    def cell(value) -> str:
        return f"{value:.2e}" if isinstance(value, float) else str(value)
    rows = [columns] + [[cell(r.get(c, "")) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(" ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows)


def _progress(cases: list):
    """``cases``, behind a progress bar on a terminal for 20 cases or more when tqdm is
    installed (it comes with the lab extra; the check needs only torch)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return cases
    return tqdm(cases, desc="check", unit="case", file=sys.stderr, disable=len(cases) < 20 or not sys.stderr.isatty())


def main(args) -> int:
    """``python -m fusedlib check``: every case the options select (:func:`iter_cases`, or
    :func:`iter_grad_cases` with ``--grad``) run against the float64 reference (:func:`run_case`,
    :func:`run_grad_case`; docs/design.md §5), printed as a table (or JSON). Returns the exit
    status: 0 when every case passed, 1 when one failed, 2 for a bad option (its message on
    stderr names it)."""
    try:
        problems = _choices(args.problem, ("84", "33", "39"), "problem")
        stages = _choices(args.stage, algebra.STAGES, "stage")
        modes = _choices(args.mode, ("train", "eval"), "mode")
        precisions = _choices(args.precision, algebra.PRECISIONS, "precision")
        shapes = [str(parse_shape(s)) for s in args.shape] if args.shape else None
        if "train" in modes and any(parse_shape(s).batch < 2 for s in shapes or ()):
            raise ValueError("--shape: train mode needs a batch of at least 2 (BatchNorm's batch statistics); "
                             "give --mode eval for a batch of 1")
        kinds = _choices(args.inputs, INPUT_KINDS, "inputs") if args.inputs else None
        if args.seeds is not None and args.seeds < 1:
            raise ValueError(f"--seeds: expected a positive number of seeds, got {args.seeds}")
        if args.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available here (use --device cpu)")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seeds = args.seeds if args.seeds is not None else (5 if args.device == "cuda" else 2)
    cases = list((iter_grad_cases if args.grad else iter_cases)(problems, stages, modes, precisions, shapes, seeds,
                                                                 args.device, kinds))
    run = run_grad_case if args.grad else run_case
    records = [run(**c) for c in _progress(cases)]
    failed = sum(not r["passed"] for r in records)
    if args.json:
        print(json.dumps({"cases": records}, indent=1))
    else:
        cols = ["problem", "stage", "mode", "precision", "shape", "seed", "input_kind"]
        cols += ["worst_ratio", "passed"] if args.grad else ["max_abs_err", "rel_err", "budget", "passed"]
        print(format_table(records, cols))
        print(f"{len(records) - failed} passed, {failed} failed")
    return 1 if failed else 0
