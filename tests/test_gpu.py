"""GPU validation of every stage's kernels (DESIGN.md §5); run with ``pytest -m gpu`` on a
machine with CUDA. Writes ``results/<gpu>/validation.json``: the environment, every case,
the compute-sanitizer runs and the SHA-256 of each kernel source they were run on.

Cases: problems 84, 33 and 39 × stages × train/eval, fp32 for every stage and tf32/3xtf32
for ``fused``; the problem's KernelBench shape, v0 and shapes that are no multiple of any
tile; ≥ 5 seeds with fresh inputs (torch.rand, torch.randn and large-offset columns with
|mean|/std ≈ 1e3); every output and workspace buffer poisoned with NaN before each launch;
the running buffers compared after 3 train steps (and then one eval step).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import copy

import fusedlib
from fusedlib import algebra, build
from fusedlib import cuda as fl_cuda
from fusedlib.reference import PRESETS, get_inputs, make_reference, parse_shape

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
SEEDS = range(5)
ODD_SHAPES = ("257x1000->999", "2x64->3", "7x33->65")
INPUT_KINDS = ("rand", "randn", "offset")


def _combos():
    for stage in algebra.STAGES:
        for precision in (algebra.PRECISIONS if stage == "fused" else ("fp32",)):
            yield stage, precision


def _cases():
    for problem in ("84", "33", "39"):
        shapes = [(problem, "rand"), ("v0", "randn")] + [(s, None) for s in ODD_SHAPES]
        for stage, precision in _combos():
            for mode in ("train", "eval"):
                for shape, kind in shapes:
                    for seed in SEEDS:
                        k = kind or INPUT_KINDS[seed % len(INPUT_KINDS)]
                        if precision == "tf32" and k == "offset":
                            continue  # TF32 operands cannot resolve |mean|/std ≈ 1e3 (see check.py)
                        yield dict(problem=problem, stage=stage, mode=mode, precision=precision,
                                   shape=str(parse_shape(shape)), seed=seed, input_kind=k)


CASES = list(_cases())
#: Normwise relative error budgets against float64 (DESIGN.md §4). TF32: operands keep 10
#: mantissa bits (truncated), ≈ 5e-4 relative error in Z, up to ≈ 2.3e-3 measured on the
#: normalized outputs of the smallest shapes: 5e-3 leaves a 2× margin.
BUDGET = {"fp32": 1e-5, "3xtf32": 1e-5, "tf32": 5e-3}


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def run_case(problem, stage, mode, precision, shape, seed, input_kind):
    """One validation case: fused module vs the float64 reference (and PyTorch's own fp32
    module) after 3 train steps (+ one eval step in eval mode), fresh inputs each step.
    Parameters are randomised (scale, γ, β) so that every coefficient path is exercised;
    problem 33/39 gets a zero and a negative scale entry."""
    sh = parse_shape(shape)
    gen = torch.Generator().manual_seed(1000 + seed)
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=seed)
    with torch.no_grad():
        m = sh.out_features
        if problem == "84":
            ref.scale.fill_(0.5 + torch.rand(1, generator=gen).item())
        elif m >= 2:
            ref.scale[0] = 0.0
            ref.scale[1] = -abs(ref.scale[1].item()) - 0.1
        ref.bn.weight.copy_(1 + 0.3 * torch.randn(m, generator=gen))
        ref.bn.bias.copy_(0.3 * torch.randn(m, generator=gen))
    ref = ref.cuda()
    ref64 = copy.deepcopy(ref).double()
    fused = fusedlib.from_reference(ref, stage=stage, precision=precision)
    steps = 3 + (mode == "eval")
    perm = torch.randperm(sh.in_features, generator=gen).cuda()
    for step in range(steps):
        if step == 3:
            for mod in (ref, ref64, fused):
                mod.eval()
        if step == steps - 1:  # PyTorch fp32 once more, summing over K in another (equally valid) order
            ref_perm = copy.deepcopy(ref)
            with torch.no_grad():
                ref_perm.gemm.weight.copy_(ref.gemm.weight[:, perm])
        x = get_inputs(sh, input_kind, gen).cuda()
        with torch.no_grad():
            y, y32, y64 = fused(x), ref(x), ref64(x.double())
    with torch.no_grad():
        y32_perm = ref_perm(x[:, perm].contiguous())
    bn, bn64 = fused.bn, ref64.bn
    buf_err = max(_relerr(bn.running_mean, bn64.running_mean), _relerr(bn.running_var, bn64.running_var))
    rel, ref_rel = _relerr(y, y64), _relerr(y32, y64)
    # fp32 noise level: the larger error of two valid fp32 evaluations (PyTorch's module with
    # K summed in two orders). Well-conditioned inputs stay under the fixed budget; on the
    # ill-conditioned large-offset inputs every fp32 evaluation loses digits, and a result
    # within twice that spread is as good as fp32 arithmetic allows.
    noise = max(ref_rel, _relerr(y32_perm, y64))
    budget = max(BUDGET[precision], 2 * noise)
    finite = bool(torch.isfinite(y).all())
    allclose = bool(torch.allclose(y, y32, atol=1e-4, rtol=1e-4))
    # KernelBench's check (atol = rtol = 1e-4 against PyTorch's fp32 module) for the fp32-class
    # modes, except on the large-offset inputs where PyTorch's own fp32 error exceeds it.
    kb_ok = allclose or precision == "tf32" or input_kind == "offset"
    passed = (finite and rel <= budget and kb_ok and buf_err <= max(BUDGET[precision], 1e-5)
              and int(bn.num_batches_tracked) == int(bn64.num_batches_tracked))
    return {"problem": problem, "stage": stage, "mode": mode, "precision": precision, "shape": str(sh),
            "seed": seed, "input_kind": input_kind, "max_abs_err": (y.double() - y64).abs().max().item(),
            "rel_err": rel, "buffer_rel_err": buf_err, "ref_fp32_rel_err": ref_rel, "fp32_noise": noise,
            "budget": budget,
            "allclose_ref_fp32_1e-4": allclose,
            "finite": finite, "passed": passed}
RECORD: dict = {"cases": [], "sanitizer": [], "determinism": []}


def _gpu_slug() -> str:
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    for slug in ("h100", "h200", "a100"):
        if slug in name.lower():
            return slug
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _environment() -> dict:
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "unknown"
    cap = torch.cuda.get_device_capability()
    return {"gpu": torch.cuda.get_device_name(), "capability": f"{cap[0]}.{cap[1]}", "driver": driver,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}


@pytest.fixture(scope="module", autouse=True)
def validation_record():
    """Poison buffers for the whole module; write results/<gpu>/validation.json at its end."""
    fl_cuda.POISON = True
    yield
    fl_cuda.POISON = False
    if not torch.cuda.is_available():
        return
    out = ROOT / "results" / _gpu_slug() / "validation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"environment": _environment(), **RECORD, "sources_sha256": build.sources_sha256(ROOT)}
    out.write_text(json.dumps(doc, indent=1) + "\n")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_case_matches_float64(case):
    result = run_case(**case)
    RECORD["cases"].append(result)
    assert result["passed"], result


@pytest.mark.parametrize("problem", ["84", "39"])
@pytest.mark.parametrize("stage,precision", list(_combos()))
def test_reruns_are_bit_identical(problem, stage, precision):
    shape = PRESETS[problem]
    model = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda()
    fused = fusedlib.from_reference(model, stage=stage, precision=precision)
    x = torch.rand(shape.batch, shape.in_features, device="cuda")
    first = fused(x)
    same = all(torch.equal(first, fused(x)) for _ in range(9))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": precision,
                                  "shape": str(shape), "reruns": 10, "bit_identical": same})
    assert same


_SANITIZE = """
import torch, fusedlib
from fusedlib.reference import make_reference
for problem in ("84", "33"):
  for n, k, m in ((130, 72, 300), (130, 70, 200)):  # K % 4 == 0 (TMA/wgmma path) and not
    for precision in {precisions}:
      ref = make_reference(problem, k, m, seed=0).cuda()
      f = fusedlib.from_reference(ref, stage="{stage}", precision=precision)
      x = torch.rand(n, k, device="cuda")
      f(x); f(x); f.eval(); f(x)
torch.cuda.synchronize()
"""


def _sanitizer_errors(output: str) -> int:
    """Errors from compute-sanitizer's closing line: memcheck prints "ERROR SUMMARY: N errors",
    racecheck "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)"; -1 if absent."""
    for line in reversed(output.splitlines()):
        if "ERROR SUMMARY:" in line:
            return int(line.split("ERROR SUMMARY:")[1].split()[0])
        if "RACECHECK SUMMARY:" in line and "(" in line:
            hazards = int(line.split("RACECHECK SUMMARY:")[1].split()[0])
            return max(hazards, int(line.split("(")[1].split()[0]))
    return -1


def test_compute_sanitizer_clean():
    """memcheck and racecheck on every stage at a small odd shape (all precisions of fused,
    train then eval): zero errors. The 8 runs go in parallel; kernels are built beforehand."""
    for stage in algebra.STAGES:
        build.load_stage(stage)  # the children load the cached builds
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = {}
    for tool in ("memcheck", "racecheck"):
        for stage in algebra.STAGES:
            precisions = list(algebra.PRECISIONS) if stage == "fused" else ["fp32"]
            code = _SANITIZE.format(stage=stage, precisions=precisions)
            runs[tool, stage] = subprocess.Popen(
                ["compute-sanitizer", "--tool", tool, sys.executable, "-c", code],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    failures = []
    for (tool, stage), proc in runs.items():
        out, _ = proc.communicate(timeout=900)
        errors = _sanitizer_errors(out)
        RECORD["sanitizer"].append({"tool": tool, "stage": stage, "errors": errors})
        if proc.returncode != 0 or errors != 0:
            failures.append(f"{tool}/{stage}: rc={proc.returncode} errors={errors}\n{out[-2000:]}")
    assert not failures, "\n".join(failures)
