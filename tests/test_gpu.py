"""GPU validation of every stage's kernels (docs/design.md §5); run with ``pytest -m gpu`` on a
machine with CUDA. Writes ``results/<gpu>/validation.json``: the environment, every case
(forward and gradients), the compute-sanitizer runs, the reruns and the SHA-256 of each
kernel source they were run on.

Cases: problems 84, 33 and 39 × stages × train/eval × precisions (every stage runs every
precision on the same GEMM engine); the problem's KernelBench shape, v0 and shapes that are
no multiple of any tile; ≥ 5 seeds with fresh inputs (torch.rand, torch.randn and
large-offset columns with |mean|/std ≈ 1e3); every output and workspace buffer poisoned with
NaN before each launch; the running buffers compared after 3 train steps (and then one eval
step). Every hardware path is validated: the default one of each precision (on an H100:
fp32 on the SIMT GEMM, tf32/3xtf32 on wgmma), then the tensor-core precisions again with
``FUSEDLIB_GEMM_PATH=mma`` (the Ampere mainloop) on the odd shapes and v0 of 84 and 33, and
3xtf32 at K = 16384 and K = 16383 on both tensor-core paths (fp32-class at every K), and
fp32 on the SIMT GEMM's 128×64 tile (the one GPUs with 64 KB of shared memory a block run)
forced with ``FUSEDLIB_SIMT_SMALL_SMEM=1``, and the wgmma GEMM's split-K forced to 3 and 2
splits (``FUSEDLIB_WGMMA_SPLITK``) and the SIMT GEMM's to 3 (``FUSEDLIB_SIMT_SPLITK``), and 3xTF32's
W parts on the wgmma GEMM both ways, split in shared memory and made by a pass over W
(``FUSEDLIB_WGMMA_WSPLIT``; the two give the same bits); offset inputs within the fp32 budget outright where the
kernels shift X by its first row (fp32, 3xtf32). The persistent wgmma GEMM gives the same bits on grids of
1, 7 and one CTA an SM (``FUSEDLIB_WGMMA_GRID``), and with either tile width of the tf32 GEMM (128 × 256
or 128 × 64, ``FUSEDLIB_WGMMA_WIDTH``), each validated where the other is the default. A NaN or an inf in x comes out non-finite on
every stage, precision and path (never a finite answer).
Gradients (the fused backward, check.run_grad_case): every stage, mode and precision of 84
and 33 at small odd shapes and v0, on both tensor-core paths, and at each KernelBench shape;
forward and backward reruns bit-identical; the sanitizer runs a backward too.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fusedlib
from fusedlib import algebra, build, check, engine
from fusedlib.reference import PRESETS, make_reference, parse_shape, problem_kind

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent

def _default_path(precision: str, shape: str | None = None) -> str:
    """The path a forward takes without the switch (in_features from ``shape``)."""
    if not torch.cuda.is_available():
        return "auto"
    k = parse_shape(shape).in_features if shape else None
    return engine.select_path(precision, torch.cuda.get_device_capability(), k, forced="auto")


def _other_tc_paths() -> list[str]:
    """Tensor-core paths this GPU has besides its default one (mma on an H100)."""
    if not torch.cuda.is_available():
        return []
    cap = torch.cuda.get_device_capability()
    return [p for p in ("mma", "wgmma") if p != _default_path("tf32")
            and cap >= engine.PATH_MIN_CAPABILITY[p] and (p != "wgmma" or cap == (9, 0))]


TC = ("tf32", "3xtf32")
#: The suite can be split over several runs by problem (FUSEDLIB_GPU_PROBLEMS=84,33 then =39,
#: with FUSEDLIB_VALIDATION_APPEND=1 for the later runs): it filters the float64 cases only.
PROBLEMS = tuple(os.environ.get("FUSEDLIB_GPU_PROBLEMS", "84,33,39").split(","))
CASES = [dict(c, path=_default_path(c["precision"], c["shape"])) for c in check.iter_cases(
    PROBLEMS, algebra.STAGES, ("train", "eval"), algebra.PRECISIONS, None, seeds=5, device="cuda")]
CASES += [dict(c, path=path) for path in _other_tc_paths() for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), TC, ["v0", "257x1000->999", "2x64->3", "7x33->65"],
    seeds=5, device="cuda") if _default_path(c["precision"], c["shape"]) != path]  # 7x33->65 runs mma already
# 3xTF32 stays fp32-class at any K: long K, and K no multiple of 4 (TMA can't: mma path)
CASES += [dict(c, path=path)
          for c in check.iter_cases([p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train",),
                                    ("3xtf32",), ["256x16384->256", "256x16383->256"], seeds=5, device="cuda")
          for path in dict.fromkeys([_default_path("3xtf32", c["shape"])] + _other_tc_paths())
          if path != "wgmma" or parse_shape(c["shape"]).in_features % 4 == 0]  # TMA needs K % 4 == 0
# The row pass of 84's fused stage keeps rows of M ≤ 8192 (M % 4 == 0) in registers, with 1, 2,
# 4 or 8 16-byte loads a thread: the shapes above take 1, 2 and 8; these take 4 and a part-filled 8.
CASES += [dict(c, path=_default_path(c["precision"], c["shape"])) for c in check.iter_cases(
    [p for p in ("84",) if p in PROBLEMS], ("fused",), ("train", "eval"), algebra.PRECISIONS,
    ["130x64->4000", "130x64->6148"], seeds=2, device="cuda")]
# The SIMT tile of GPUs whose blocks get less shared memory (128×64, sm_75), forced on this
# one ($FUSEDLIB_SIMT_SMALL_SMEM=1): shapes whose grids take 128-row tiles, K aligned and odd.
SIMT_SMALL = "simt-128x64"
CASES += [dict(c, path=SIMT_SMALL) for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("fp32",),
    ["1152x1920->1920", "1157x1001->1921"], seeds=3, device="cuda") if c["seed"] < 2 or "1001" in c["shape"]]
# Split-K of the wgmma GEMM: the small shapes above split on their own (v0: 8 splits in tf32 and
# in 3xtf32); forced to 3 splits ($FUSEDLIB_WGMMA_SPLITK=3: uneven K ranges, K-step ranges
# across 3xTF32's segments), and to 2 at 84's KernelBench shape (split-K on persistent CTAs).
WGMMA_SPLITK = {"wgmma-splitk3": "3", "wgmma-splitk2": "2"}
CASES += [dict(c, path="wgmma-splitk3") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), TC,
    ["257x1000->999", "v0"], seeds=2, device="cuda")] if _default_path("tf32") == "wgmma" else []
CASES += [dict(c, path="wgmma-splitk2") for c in check.iter_cases(
    [p for p in ("84",) if p in PROBLEMS], ("sums", "fused"), ("train",), TC, ["84"], seeds=1,
    device="cuda")] if _default_path("tf32") == "wgmma" else []
# 3xTF32's W parts on the wgmma GEMM, both ways on shapes where the other is the default
# ($FUSEDLIB_WGMMA_WSPLIT, gemm_wgmma.cuh wg_w_pass): the pass over W at small odd shapes and v0
# (split-K; the split in shared memory is their default), the split in shared memory at 39's
# KernelBench shape (128 row tiles: the pass is its default).
WGMMA_WSPLIT = {"wgmma-wpass": "pass", "wgmma-wsmem": "smem", "wgmma-swap": "swap"}
CASES += [dict(c, path="wgmma-wpass") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("3xtf32",),
    ["257x1000->999", "v0"], seeds=2, device="cuda")] if _default_path("tf32") == "wgmma" else []
CASES += [dict(c, path="wgmma-wsmem") for c in check.iter_cases(
    [p for p in ("39",) if p in PROBLEMS], algebra.STAGES, ("train",), ("3xtf32",), ["39"], seeds=1,
    device="cuda")] if _default_path("tf32") == "wgmma" else []
# The swapped 3xTF32 GEMM (Zᵀ = W Xᵀ, X's parts from a pass: gemm_wgmma.cuh wg_swap), the default at
# 84's and 33's KernelBench shapes: forced ($FUSEDLIB_WGMMA_WSPLIT=swap) at odd shapes (a last tile
# of Z's rows with 1 or 2 of 128, a last block of columns part-filled, one tile, v0 without its
# split-K), with offset inputs among them (the first-row shift, which the X-parts pass applies),
# and the unswapped GEMM forced at the KernelBench shapes.
CASES += [dict(c, path="wgmma-swap") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("3xtf32",),
    ["257x1000->999", "v0", "130x64->4000", "2x64->3"], seeds=3, device="cuda")] if _default_path("tf32") == "wgmma" else []
CASES += [dict(c, path="wgmma-wsmem") for p in ("84", "33") if p in PROBLEMS for c in check.iter_cases(
    [p], algebra.STAGES, ("train",), ("3xtf32",), [p], seeds=1, device="cuda")] if _default_path("tf32") == "wgmma" else []
# The tf32 wgmma GEMM's two tile widths (gemm_wgmma.cuh wg_tile_width: 128 × 256, or 128 × 64 where
# the wide tiles would leave most SMs idle): the small shapes above take the narrow tile, the
# KernelBench shapes the wide one; each forced ($FUSEDLIB_WGMMA_WIDTH) at shapes where the other is
# the default: the wide tile at odd shapes and v0, the narrow one on a persistent grid of 216 tiles
# (a last row tile of 6 rows, a last column tile of 28 columns).
WGMMA_WIDTH = {"wgmma-wide": "256", "wgmma-narrow": "64"}
CASES += [dict(c, path="wgmma-wide") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("tf32",),
    ["257x1000->999", "v0", "2x64->3"], seeds=2, device="cuda")] if _default_path("tf32") == "wgmma" else []
CASES += [dict(c, path="wgmma-narrow") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("tf32",),
    ["1030x200->1500"], seeds=2, device="cuda")] if _default_path("tf32") == "wgmma" else []
# Split-K of the SIMT GEMM (fp32 on the 32×32 tile): v0 splits on its own (8 splits of 8 K
# steps); forced to 3 ($FUSEDLIB_SIMT_SPLITK=3: uneven K ranges, a split of one K step at
# 7x33->65, whose K % 4 ≠ 0 takes the scalar loads, and at 2x64->3, one tile).
SIMT_SPLITK = {"simt-splitk3": "3"}
CASES += [dict(c, path="simt-splitk3") for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train", "eval"), ("fp32",),
    ["257x1000->999", "v0", "2x64->3", "7x33->65"], seeds=2, device="cuda")]
# Gradients (check.run_grad_case): 84 and 33 × stages × modes × precisions at check.GRAD_SHAPES
# (seeds 0, 1, 2: rand, randn, offset; tf32 without offset),
# the tensor-core precisions again on the other tensor-core path, and each problem's
# KernelBench shape once (fused, train). The backward's GEMMs are cuBLAS's; the path is the
# forward's (it makes the Z the backward differentiates).
_GRAD_PROBLEMS = [p for p in ("84", "33") if p in PROBLEMS]
GRAD_CASES = [dict(c, path=_default_path(c["precision"], c["shape"])) for c in check.iter_grad_cases(
    _GRAD_PROBLEMS, algebra.STAGES, ("train", "eval"), algebra.PRECISIONS, seeds=3, device="cuda")]
GRAD_CASES += [dict(c, path=path) for path in _other_tc_paths() for c in check.iter_grad_cases(
    _GRAD_PROBLEMS, algebra.STAGES, ("train",), TC, ["257x1000->999"], seeds=3, device="cuda")]
GRAD_CASES += [dict(c, path=_default_path(c["precision"], c["shape"])) for problem in PROBLEMS
               for c in check.iter_grad_cases([problem], ["fused"], ("train",), algebra.PRECISIONS, [problem],
                                              seeds=1, device="cuda")]
RECORD: dict = {"cases": [], "gradients": [], "sanitizer": [], "determinism": []}


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
        driver = driver.splitlines()[0] if driver else "unknown"  # one line a GPU; the driver is the host's
    except OSError:
        driver = "unknown"
    cap = torch.cuda.get_device_capability()
    return {"gpu": torch.cuda.get_device_name(), "capability": f"{cap[0]}.{cap[1]}", "driver": driver,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}


#: Set to 1 to merge this run's records into an existing validation.json made on the same
#: kernel sources (a suite split over several runs, e.g. ``-k "84 or 33"`` then ``-k 39``);
#: a record of the same case (or sanitizer/rerun configuration) is replaced.
APPEND_VAR = "FUSEDLIB_VALIDATION_APPEND"
#: Set to a path to write the record there instead (parts of the suite run side by side, each
#: into a file of its own, then joined with :func:`merge_files`).
OUT_VAR = "FUSEDLIB_VALIDATION_OUT"
_CASE_KEY = ("problem", "stage", "mode", "precision", "shape", "seed", "input_kind", "path")
_KEYS = {"cases": _CASE_KEY, "gradients": _CASE_KEY, "sanitizer": ("tool", "stage", "path"),
         "determinism": ("problem", "stage", "precision", "shape", "pass"),
         "training": ("problem", "stage", "precision", "optimizer", "variant"),  # tests/test_training.py
         "kernelbench": ("problem", "dtype", "stage", "precision", "shape"),  # tests/test_kernelbench_eval.py
         "mixed_precision": ("test", "problem", "stage", "mode", "dtype", "path", "shape")}  # test_mixed_precision.py


def _row_key(part: str, row: dict) -> tuple:
    """What identifies a row of record list ``part``: its fields in :data:`_KEYS`, or for a
    list not named there, every field holding a string (the labels; the results are numbers
    and booleans)."""
    fields = _KEYS.get(part) or sorted(k for k, v in row.items() if isinstance(v, str))
    return tuple((k, row.get(k)) for k in fields)


def merge_records(old: dict, new: dict) -> dict:
    """``old``'s record lists updated with ``new``'s (same key: replaced; new keys: added):
    every list of :data:`_KEYS` (empty if neither has it) and any other list either holds
    (written by another test module, e.g. tests/test_training.py's "training"); entries that
    are no lists (environment, sources_sha256) are left to the caller."""
    merged = {}
    for part in dict.fromkeys([*_KEYS, *old, *new]):
        lists = [d.get(part, []) for d in (old, new)]
        if not all(isinstance(rows, list) for rows in lists):
            continue
        rows = {}
        for row in lists[0] + lists[1]:
            rows[_row_key(part, row)] = row
        merged[part] = list(rows.values())
    return merged


def merge_files(parts: list[Path], out: Path) -> None:
    """Join validation records of parts of the suite, made on the same kernel sources, into
    ``out`` (:func:`merge_records`; the first part's environment).

    Raises:
        ValueError: the parts were made on different kernel sources.
    """
    docs = [json.loads(Path(p).read_text()) for p in parts]
    if any(d["sources_sha256"] != docs[0]["sources_sha256"] for d in docs):
        raise ValueError("parts: made on different kernel sources")
    record: dict = {}
    for doc in docs:
        record = merge_records(record, doc)
    out.write_text(json.dumps({"environment": docs[0]["environment"], **record,
                               "sources_sha256": docs[0]["sources_sha256"]}, indent=1) + "\n")


@pytest.fixture(scope="module", autouse=True)
def validation_record():
    """Poison buffers for the whole module; write results/<gpu>/validation.json at its end
    (merged into the existing one when $FUSEDLIB_VALIDATION_APPEND is 1 and it was made on
    the same kernel sources)."""
    os.environ["FUSEDLIB_POISON"] = "1"  # read by the operator's host code (torch_op.cuh) each call
    yield
    del os.environ["FUSEDLIB_POISON"]
    if not torch.cuda.is_available():
        return
    out = Path(os.environ.get(OUT_VAR) or ROOT / "results" / _gpu_slug() / "validation.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    sources = build.sources_sha256(ROOT)
    record = dict(RECORD)
    if os.environ.get(APPEND_VAR) == "1" and out.exists():
        old = json.loads(out.read_text())
        if old.get("sources_sha256") == sources:
            record = merge_records(old, RECORD)
    doc = {"environment": _environment(), **record, "sources_sha256": sources}
    out.write_text(json.dumps(doc, indent=1) + "\n")


_BASE_MODELS: dict = {}


def _cached_reference(problem, in_features, out_features, seed=None):
    """make_reference, built once per (problem, shape, seed) and deep-copied after: the
    KernelBench shapes' CPU initialisation (67 M weights at 84) dominates a case otherwise.
    Same parameters as a fresh build (the cases draw nothing else from the global RNG)."""
    key = (problem_kind(problem), in_features, out_features, seed)
    if key not in _BASE_MODELS:  # at most 90 models, 3 GB of host memory
        _BASE_MODELS[key] = make_reference(problem, in_features, out_features, seed)
    return copy.deepcopy(_BASE_MODELS[key])


def _run_recorded(case: dict, monkeypatch, run, part: str) -> None:
    """Run one case with ``run`` (check.run_case or run_grad_case) on the GEMM path it names
    (``FUSEDLIB_GEMM_PATH``), record it under RECORD[part] and assert that it passed."""
    case = dict(case)
    path = case.pop("path")
    monkeypatch.setenv(engine.ENV_VAR, "simt" if path == SIMT_SMALL or path in SIMT_SPLITK else
                       "wgmma" if path in WGMMA_SPLITK or path in WGMMA_WSPLIT or path in WGMMA_WIDTH else path)
    if path == SIMT_SMALL:
        monkeypatch.setenv("FUSEDLIB_SIMT_SMALL_SMEM", "1")
    if path in SIMT_SPLITK:
        monkeypatch.setenv("FUSEDLIB_SIMT_SPLITK", SIMT_SPLITK[path])
    if path in WGMMA_SPLITK:
        monkeypatch.setenv("FUSEDLIB_WGMMA_SPLITK", WGMMA_SPLITK[path])
    if path in WGMMA_WSPLIT:
        monkeypatch.setenv("FUSEDLIB_WGMMA_WSPLIT", WGMMA_WSPLIT[path])
    if path in WGMMA_WIDTH:
        monkeypatch.setenv("FUSEDLIB_WGMMA_WIDTH", WGMMA_WIDTH[path])
    monkeypatch.setattr(check, "make_reference", _cached_reference)
    result = {**run(**case), "path": path}
    RECORD[part].append(result)
    assert result["passed"], result


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for k, v in c.items() if k != "device"))
def test_case_matches_float64(case, monkeypatch):
    """docs/design.md §5 through check.run_case: float64 reference, fresh inputs, running buffers;
    the GEMM path forced through ``FUSEDLIB_GEMM_PATH``."""
    _run_recorded(case, monkeypatch, check.run_case, "cases")


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "-".join(str(v) for k, v in c.items() if k != "device"))
def test_gradients_match_float64(case, monkeypatch):
    """The backward (issue 12) through check.run_grad_case: every gradient against float64
    within the forward's budget per precision (or twice PyTorch's own error at that
    precision), the bias's gradient exactly zero in train mode; outputs and scratch poisoned."""
    _run_recorded(case, monkeypatch, check.run_grad_case, "gradients")


#: The first-row shift (train mode at fp32 and 3xTF32: algebra.train_gemm) on every path that
#: runs it: offset inputs (|x̄|/spread ≈ 1e3) within the precision's own budget, 1e-5, with no
#: allowance for PyTorch's error there (2.6e-5 to 3e-4 at these shapes).
SHIFT_CASES = [dict(c, path=path) for path in ["auto"] + _other_tc_paths() for c in check.iter_cases(
    [p for p in ("84", "33") if p in PROBLEMS], algebra.STAGES, ("train",),
    algebra.SHIFTED_PRECISIONS if path == "auto" else ("3xtf32",), ["2x64->3", "7x33->65", "257x1000->999"],
    seeds=3, device="cuda", input_kinds=["offset"])]


@pytest.mark.parametrize("case", SHIFT_CASES, ids=lambda c: "-".join(str(v) for k, v in c.items() if k != "device"))
def test_offset_inputs_within_the_fp32_budget(case, monkeypatch):
    """Where the kernels shift X by its first row, offset inputs are no longer ill-conditioned
    for them: output and running buffers within BUDGET (1e-5) of float64 outright."""
    case = dict(case)
    monkeypatch.setenv(engine.ENV_VAR, case.pop("path"))
    monkeypatch.setattr(check, "make_reference", _cached_reference)
    result = check.run_case(**case)
    assert result["finite"] and result["rel_err"] <= check.BUDGET[case["precision"]], result
    assert result["buffer_rel_err"] <= check.BUDGET[case["precision"]], result


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage,precision", list(check.combos(algebra.STAGES, algebra.PRECISIONS)))
def test_backward_reruns_are_bit_identical(problem, stage, precision):
    """Five train-mode forward + backward calls on the same x and dY give the same gradients,
    bit for bit (no float atomics: the column partials merge in a fixed order)."""
    shape = parse_shape("257x1000->999")
    model = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda()
    fused = fusedlib.from_reference(model, stage=stage, precision=precision)
    x = torch.rand(shape.batch, shape.in_features, device="cuda")
    dy = torch.randn(shape.batch, shape.out_features, device="cuda")
    runs = []
    for _ in range(5):
        fused.zero_grad(set_to_none=True)
        xg = x.clone().requires_grad_()
        fused(xg).backward(dy)
        runs.append([xg.grad] + [p.grad for p in fused.parameters()])
    same = all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": precision,
                                  "shape": str(shape), "pass": "backward", "reruns": 5, "bit_identical": same})
    assert same


@pytest.mark.parametrize("problem,preset", [("84", "84"), ("39", "39"), ("84", "v0")])  # v0: split-K
@pytest.mark.parametrize("stage,precision", list(check.combos(algebra.STAGES, algebra.PRECISIONS)))
def test_reruns_are_bit_identical(problem, preset, stage, precision):
    shape = PRESETS[preset]
    model = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda()
    fused = fusedlib.from_reference(model, stage=stage, precision=precision)
    x = torch.rand(shape.batch, shape.in_features, device="cuda")
    with torch.no_grad():
        first = fused(x)
        same = all(torch.equal(first, fused(x)) for _ in range(9))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": precision,
                                  "shape": str(shape), "pass": "forward", "reruns": 10, "bit_identical": same})
    assert same


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage,precision", list(check.combos(algebra.STAGES, algebra.PRECISIONS)))
@pytest.mark.parametrize("path", ["default", *_other_tc_paths()])
def test_non_finite_inputs_give_non_finite_rows(problem, stage, precision, path, monkeypatch):
    """A NaN or an inf in x never comes out finite (docs/design.md §5): the row that holds it is
    non-finite in every column in eval mode while the other rows stay finite, and in train mode
    (the batch statistics of every column) the whole output is — whether it sits in row 0 (x₀ of
    the first-row shift) or another, on every GEMM path: the tensor cores read it, and the 3xTF32
    splits keep it (a NaN's small TF32 part is a NaN)."""
    if path != "default":
        if precision == "fp32":
            pytest.skip("fp32 runs on the SIMT GEMM on every GPU")
        monkeypatch.setenv("FUSEDLIB_GEMM_PATH", path)
    model = make_reference(problem, 1000, 999, seed=0).cuda()  # K % 4 == 0: the wgmma path where there is one
    for value in (float("nan"), float("inf")):
        for row in (0, 130):
            x = torch.rand(257, 1000, device="cuda")
            x[row, 517] = value
            for training in (True, False):
                fused = fusedlib.from_reference(copy.deepcopy(model), stage=stage, precision=precision)
                fused.train(training)
                with torch.no_grad():
                    y = fused(x)
                where = f"{value} at row {row}, {'train' if training else 'eval'}"
                if training:
                    assert not torch.isfinite(y).any(), where
                else:
                    others = torch.ones(257, dtype=torch.bool, device="cuda")
                    others[row] = False
                    assert not torch.isfinite(y[row]).any() and torch.isfinite(y[others]).all(), where


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the persistent wgmma GEMM runs on sm_90 only")
@pytest.mark.parametrize("problem,shape", [("84", "257x1000->999"), ("33", "257x1000->999"), ("84", "84")])
@pytest.mark.parametrize("stage,precision", [(s, "tf32") for s in algebra.STAGES])
def test_persistent_grid_sizes_are_bit_identical(problem, shape, stage, precision, monkeypatch):
    """The persistent wgmma GEMM (tf32; 3xTF32 runs one CTA a tile) on 1, 7 and one CTA an SM ($FUSEDLIB_WGMMA_GRID): the same
    outputs and running buffers bit for bit after two train steps and an eval step (the tiles
    and merge units go to CTAs as they are ready; each merge adds the row tiles in the fixed
    merge order, whatever CTA ran them). One CTA runs every unit: the load ring's phases across
    many tiles, and merge units after its own tiles."""
    if shape == "84" and stage in ("naive", "fold"):
        pytest.skip("the KernelBench shape once a precision, in the statistics stages")
    sh = PRESETS[shape] if shape in PRESETS else parse_shape(shape)
    model = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.randn(sh.batch, sh.in_features, device="cuda")
    runs = []
    for grid in ("1", "7", "0"):  # 0: the default, one CTA an SM
        monkeypatch.setenv("FUSEDLIB_WGMMA_GRID", grid)
        fused = fusedlib.from_reference(copy.deepcopy(model), stage=stage, precision=precision)
        with torch.no_grad():
            outs = [fused(x), fused(x)]
            fused.eval()
            outs += [fused(x), fused.bn.running_mean.clone(), fused.bn.running_var.clone()]
        runs.append(outs)
    same = all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": precision,
                                  "shape": str(sh), "pass": "grid 1, 7, SMs", "reruns": 3, "bit_identical": same})
    assert same
    assert all(torch.isfinite(t).all() for t in runs[0])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the wgmma GEMM runs on sm_90 only")
@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage,dtype", [(s, d) for s in ("sums", "fused") for d in (torch.float32, torch.bfloat16)],
                         ids=str)
def test_tile_widths_are_bit_identical(problem, stage, dtype, monkeypatch):
    """The tf32 wgmma GEMM's two tile widths ($FUSEDLIB_WGMMA_WIDTH=256, 64; one split each, as the
    split-K count changes the sum's order): the same outputs and running buffers bit for bit after
    two train steps and an eval step, float32 (tf32) and bf16 (the statistics' partials are by 128-row
    tiles and single columns, and their merge order does not depend on the column tiles)."""
    sh = parse_shape("257x1000->999")
    model = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=dtype)
    monkeypatch.setenv(engine.ENV_VAR, "wgmma")
    monkeypatch.setenv("FUSEDLIB_WGMMA_SPLITK", "1")
    runs = []
    for width in ("256", "64"):
        monkeypatch.setenv("FUSEDLIB_WGMMA_WIDTH", width)
        fused = fusedlib.from_reference(copy.deepcopy(model), stage=stage, precision="tf32").to(dtype)
        with torch.no_grad():
            outs = [fused(x), fused(x)]
            fused.eval()
            outs += [fused(x), fused.bn.running_mean.clone(), fused.bn.running_var.clone()]
        runs.append(outs)
    same = all(torch.equal(a, b) for a, b in zip(runs[1], runs[0]))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": f"tf32 ({dtype})",
                                  "shape": str(sh), "pass": "tile widths 256, 64", "reruns": 2, "bit_identical": same})
    assert same
    assert all(torch.isfinite(t).all() for t in runs[0])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the wgmma GEMM runs on sm_90 only")
@pytest.mark.parametrize("problem,shape", [("84", "257x1000->999"), ("33", "257x1000->999"), ("84", "v0")])
@pytest.mark.parametrize("stage", algebra.STAGES)
def test_w_split_ways_are_bit_identical(problem, shape, stage, monkeypatch):
    """3xTF32 on the wgmma GEMM: W's parts split in shared memory and made by the pass over W
    ($FUSEDLIB_WGMMA_WSPLIT=smem, pass) give the same outputs and running buffers bit for bit
    after two train steps and an eval step (one split of a word, split_w4, in both), and W
    changed in place between calls (as a fused optimizer writes it) is seen by both."""
    sh = PRESETS[shape] if shape in PRESETS else parse_shape(shape)
    model = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    x = torch.randn(sh.batch, sh.in_features, device="cuda")
    runs = []
    for way in ("smem", "pass"):
        monkeypatch.setenv("FUSEDLIB_WGMMA_WSPLIT", way)
        monkeypatch.setenv(engine.ENV_VAR, "wgmma")
        fused = fusedlib.from_reference(copy.deepcopy(model), stage=stage, precision="3xtf32")
        with torch.no_grad():
            outs = [fused(x)]
            fused.gemm.weight.mul_(1.5)  # in place, as the optimizers' fused kernels write it
            outs += [fused(x)]
            fused.eval()
            outs += [fused(x), fused.bn.running_mean.clone(), fused.bn.running_var.clone()]
        runs.append(outs)
    same = all(torch.equal(a, b) for a, b in zip(runs[1], runs[0]))
    RECORD["determinism"].append({"problem": problem, "stage": stage, "precision": "3xtf32",
                                  "shape": str(sh), "pass": "W split in smem, by the pass", "reruns": 2,
                                  "bit_identical": same})
    assert same
    assert all(torch.isfinite(t).all() for t in runs[0])
    assert not torch.equal(runs[0][0], runs[0][1])  # the second call saw the new W


_SANITIZE = """
import torch, fusedlib
from fusedlib.reference import make_reference
for problem in ("84", "33"):
  for n, k, m in ((130, 264, 300), (130, 70, 200)):  # K % 4 == 0 (TMA/wgmma path; fp32 on 2 SIMT splits) and not
    for precision in {precisions}:
      if "{path}".startswith("wgmma") and k % 4:
        continue
      ref = make_reference(problem, k, m, seed=0).cuda()
      f = fusedlib.from_reference(ref, stage="{stage}", precision=precision)
      x = torch.rand(n, k, device="cuda")
      with torch.no_grad():
        f(x); f(x); f.eval(); f(x)
      for training in (True, False):  # the backward: its kernels (train) and cuBLAS
        f.train(training)
        f(x.clone().requires_grad_()).square().sum().backward()
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
    """memcheck and racecheck on every stage and every GEMM path at small odd shapes (train
    then eval, forward then forward + backward): zero errors. Default paths: every precision (fp32 on SIMT, tf32/3xtf32 on
    the default tensor-core path); each other tensor-core path: tf32 and 3xtf32. The runs go
    in parallel; kernels are built beforehand."""
    for stage in algebra.STAGES:
        build.load_stage(stage)  # the children load the cached builds
    runs = {}
    for tool in ("memcheck", "racecheck"):
        for stage in algebra.STAGES:
            wgmma = _default_path("tf32") == "wgmma"
            for path in ["auto"] + _other_tc_paths() + (["wgmma-wpass"] if wgmma else []):
                precisions = list(algebra.PRECISIONS) if path == "auto" else ["3xtf32"] if path in WGMMA_WSPLIT else list(TC)
                code = _SANITIZE.format(stage=stage, precisions=precisions, path=path)
                env = dict(os.environ, PYTHONPATH=str(ROOT), **{engine.ENV_VAR: "wgmma" if path in WGMMA_WSPLIT else path})
                if path in WGMMA_WSPLIT:
                    env["FUSEDLIB_WGMMA_WSPLIT"] = WGMMA_WSPLIT[path]
                runs[tool, stage, path] = subprocess.Popen(
                    ["compute-sanitizer", "--tool", tool, sys.executable, "-c", code],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    failures = []
    for (tool, stage, path), proc in runs.items():
        out, _ = proc.communicate(timeout=900)
        errors = _sanitizer_errors(out)
        RECORD["sanitizer"].append({"tool": tool, "stage": stage, "path": path, "errors": errors})
        if proc.returncode != 0 or errors != 0:
            failures.append(f"{tool}/{stage}/{path}: rc={proc.returncode} errors={errors}\n{out[-2000:]}")
    assert not failures, "\n".join(failures)
