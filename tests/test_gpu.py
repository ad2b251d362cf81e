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

import fusedlib
from fusedlib import algebra, build, check
from fusedlib import cuda as fl_cuda
from fusedlib.reference import PRESETS, make_reference

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
CASES = list(check.iter_cases(("84", "33", "39"), algebra.STAGES, ("train", "eval"), algebra.PRECISIONS,
                              None, seeds=5, device="cuda"))
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


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for k, v in c.items() if k != "device"))
def test_case_matches_float64(case):
    """DESIGN.md §5 through check.run_case: float64 reference, fresh inputs, running buffers."""
    result = check.run_case(**case)
    RECORD["cases"].append(result)
    assert result["passed"], result


@pytest.mark.parametrize("problem", ["84", "39"])
@pytest.mark.parametrize("stage,precision", list(check.combos(algebra.STAGES, algebra.PRECISIONS)))
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
