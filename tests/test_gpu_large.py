"""Sizes beyond 32-bit indexing: batch 65 537, in_features 64, out_features 32 768, so that Y
has N·M = 2 147 516 416 > 2³¹ elements (the kernels take each dimension as an int and every
offset along a product of two in 64 bits: fusedlib/kernels/common.cuh kMaxDim).

GPU part (``pytest -m gpu tests/test_gpu_large.py``; ``make check-gpu`` runs it as the suite's
part "large", tests/run_gpu_suite.py): every stage × precision (fp32, tf32, 3xtf32) × problem
(84, 33) × mode (train, eval) at that shape on the default GEMM path, and tf32/3xtf32 again on
the mma.sync path (``FUSEDLIB_GEMM_PATH=mma``) where the default is another, with every output
and workspace buffer poisoned with NaN first; and at 33 600 000 × 4 → 8 (TALL: more row tiles
than a grid's y dimension holds, so the SIMT and mma.sync GEMMs and the backward's row-tile kernels
run as several launches) every stage × problem × mode on the SIMT (fp32) and mma.sync (tf32)
GEMMs. Each case is held to fusedlib/check.py's rules
against PyTorch's reference module (:func:`fusedlib.check.case_model`: its randomised scale,
γ, β and running buffers): the forward's output within ``check.case_budget(precision, noise)``
of float64 (noise: PyTorch's own fp32 module's error), KernelBench's allclose(1e-4) against
PyTorch's fp32 module (fp32, 3xtf32), the running buffers within the budget and
num_batches_tracked advanced; in train mode also every gradient (x, gemm.weight, gemm.bias,
scale, bn.weight, bn.bias for dY = randn) as check.run_grad_case holds it (noise: PyTorch's fp32
module, for tf32 on TF32-truncated operands; the bias's gradient exactly zero).

Memory: the float64 reference is never held whole (Y in float64 alone would be 17 GB): it is
the reference module's parameters in float64 applied to row chunks (:class:`Float64Reference`:
BatchNorm's batch statistics from two chunked passes, the gradient through them added in a
second chunked pass), and errors are summed chunk by chunk on the GPU. Tensors are freed
between phases and cases. Peak (a 3xtf32 train step of 84): Y and the Z the backward keeps,
dY, and the backward's dZ' and dZ'ᵀ as TF32 parts, 7 × 8.6 GB ≈ 60 GB; PyTorch's fp32 module's
own train step (the gradients' noise) needs about as much. Runtime on an H100: about 3–5
minutes for the 112 cases (80 at 65 537 × 64 → 32 768, 32 TALL; the kernels built beforehand).

Records go to the validation record under the key "large" (tests/test_gpu.py's RECORD,
FUSEDLIB_VALIDATION_OUT and merge_files), one per case: max_abs_err, rel_err, budget,
buffer_rel_err, the gradients' errors, passed and path.

CPU part (runs everywhere): the chunked float64 reference against the float64 reference
module's own forward, buffers and autograd; and the Python side takes these sizes (the
modules' forward and backward on the meta device: nothing checks sizes against 2³¹).
"""
from __future__ import annotations

import copy
import gc
import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fusedlib
from fusedlib import algebra, build, check, engine
from fusedlib.modules import reference_kind
from fusedlib.reference import Shape, get_inputs, make_reference, parse_shape

ROOT = Path(__file__).resolve().parent.parent
#: N·M = 2 147 516 416 > 2³¹ (the smallest batch past it at out_features 32 768).
SHAPE = Shape(65537, 64, 32768)
#: More row tiles than a grid's y dimension holds (65535): 262 500 GEMM tiles of 128 rows, 1 050 000
#: dZ' tiles of 32 and 65 625 chunks of 512 rows of X in the backward, so every kernel launched
#: over row tiles runs as several launches (common.cuh kMaxGridY); N·K = 134 400 000, 1.1 GB a Y.
TALL = Shape(33_600_000, 4, 8)
#: Rows a chunk of the float64 reference (SHAPE): (2048, 32768) float64 tensors of 512 MiB.
CHUNK = 2048
#: GPU memory the cases need (bytes): 7 (N, M) float32 tensors of 8 GiB at the peak, and some.
NEEDED_BYTES = 60 * 2**30
SEED = 0
TC = ("tf32", "3xtf32")


def relerr(got: torch.Tensor, want: torch.Tensor) -> float:
    """Normwise relative error ‖got − want‖ / ‖want‖ in float64 (check._relerr's rule)."""
    return ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300)).item()


class Float64Reference:
    """A reference module's computation in float64, on row chunks of x (the module itself on
    (N, M) at this size would need 17 GB a float64 tensor).

    BatchNorm couples the rows only through the batch statistics μ, σ² (train mode; eval mode:
    the running buffers), so with them known Y is computed chunk by chunk: Z = x Wᵀ + b, BN's
    input U (84: Z; 33: Z∘s), V = γ(U − μ)/√(σ² + ε) + β, Y = softmax(s·V) (84) or V (33), as
    the module does. In train mode μ and σ² (biased) come from two chunked passes first, and the
    running buffers follow nn.BatchNorm1d's update (unbiased variance). Gradients of
    L = Σ dY∘Y: one chunked backward with μ and σ² as leaves gives every direct term and
    ∂L/∂μ, ∂L/∂σ²; a second adds their path through the statistics, ∂L/∂U_i += (∂L/∂μ +
    2 ∂L/∂σ² (U_i − μ)) / N, back to x and the Linear's (and 33's scale's) parameters.
    """

    def __init__(self, ref: torch.nn.Module, x: torch.Tensor, training: bool, chunk: int = CHUNK):
        self.kind = reference_kind(ref)
        self.params = {name: p.detach().double().clone().requires_grad_() for name, p in ref.named_parameters()}
        self.x = x.detach().double()
        self.n = n = x.shape[0]
        self.rows = [slice(i, min(i + chunk, n)) for i in range(0, n, chunk)]
        bn = ref.bn
        self.eps = bn.eps
        rm, rv = bn.running_mean.detach().double(), bn.running_var.detach().double()
        self.num_batches_tracked = int(bn.num_batches_tracked) + (1 if training else 0)
        if training:
            with torch.no_grad():
                mean = sum(self.bn_input(self.x[r]).sum(0) for r in self.rows) / n
                var = sum((self.bn_input(self.x[r]) - mean).square().sum(0) for r in self.rows) / n
            mom = bn.momentum if bn.momentum is not None else 1.0 / self.num_batches_tracked
            self.running = ((1 - mom) * rm + mom * mean, (1 - mom) * rv + mom * var * (n / (n - 1)))
        else:
            mean, var = rm, rv
            self.running = (rm, rv)
        self.mean, self.var = mean, var

    def bn_input(self, x: torch.Tensor) -> torch.Tensor:
        """U for rows x: the Linear's output (84) or it times the scale (33)."""
        p = self.params
        z = F.linear(x, p["gemm.weight"], p["gemm.bias"])
        return z if self.kind == "84" else z * p["scale"]

    def output(self, u: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """Y from BN's input U and the statistics it is normalised with."""
        p = self.params
        v = (u - mean) * torch.rsqrt(var + self.eps) * p["bn.weight"] + p["bn.bias"]
        return torch.softmax(p["scale"] * v, dim=1) if self.kind == "84" else v

    def y(self, rows: slice) -> torch.Tensor:
        """Y[rows] in float64."""
        with torch.no_grad():
            return self.output(self.bn_input(self.x[rows]), self.mean, self.var)

    def compare(self, got: torch.Tensor, peer: torch.Tensor | None = None) -> dict:
        """Errors of ``got`` (N, M) (and of ``peer``, PyTorch's fp32 output) against Y, chunk by
        chunk: max_abs_err, rel_err, finite; ref_fp32_rel_err and allclose_ref_fp32_1e-4
        (KernelBench's check of got against peer) when peer is given."""
        sq_ref, sq, sq_peer, max_abs, finite, close = 0.0, 0.0, 0.0, 0.0, True, True
        with torch.no_grad():
            for r in self.rows:
                want = self.y(r)
                g = got[r]
                finite = finite and bool(torch.isfinite(g).all())
                d = g.double() - want
                sq += d.square().sum().item()
                max_abs = max(max_abs, d.abs().max().item()) if finite else math.inf
                sq_ref += want.square().sum().item()
                if peer is not None:
                    sq_peer += (peer[r].double() - want).square().sum().item()
                    close = close and bool(torch.allclose(g, peer[r], atol=1e-4, rtol=1e-4))
                del want, g, d
        out = {"max_abs_err": max_abs, "rel_err": math.sqrt(sq / sq_ref) if finite else math.inf, "finite": finite}
        if peer is not None:
            out.update({"ref_fp32_rel_err": math.sqrt(sq_peer / sq_ref), "allclose_ref_fp32_1e-4": close})
        return out

    def gradients(self, dy: torch.Tensor) -> dict[str, torch.Tensor]:
        """The gradients of L = Σ dY∘Y (check.GRAD_NAMES → float64 tensors), dy (N, M) on x's
        device in any float dtype. Train mode (μ, σ² are the batch's) only."""
        for p in self.params.values():
            p.grad = None
        mean = self.mean.detach().clone().requires_grad_()
        var = self.var.detach().clone().requires_grad_()
        dx = torch.empty_like(self.x)
        for r in self.rows:  # every direct term, and ∂L/∂μ, ∂L/∂σ²
            xc = self.x[r].clone().requires_grad_()
            self.output(self.bn_input(xc), mean, var).backward(dy[r].double())
            dx[r] = xc.grad
        dmean, dvar = mean.grad, var.grad
        for r in self.rows:  # through the batch statistics
            xc = self.x[r].clone().requires_grad_()
            u = self.bn_input(xc)
            u.backward((dmean + 2 * dvar * (u.detach() - self.mean)) / self.n)
            dx[r] += xc.grad
        p = self.params
        return {"x": dx, **{name: p[name].grad.detach().clone() for name in check.GRAD_NAMES[1:]}}


# ---------------------------------------------------------------------------------------- GPU


def _default_path(precision: str, shape: Shape = SHAPE) -> str:
    if not torch.cuda.is_available():
        return "auto"
    return engine.select_path(precision, torch.cuda.get_device_capability(), shape.in_features, forced="auto")


def _cases() -> list[dict]:
    """SHAPE: every stage × precision × problem × mode on the default path, then tf32/3xtf32 on
    mma.sync where that is not the default (on an H100: wgmma is). TALL: every stage × problem ×
    mode on the two GEMMs whose grids hold row tiles along y (fp32 on SIMT, tf32 on mma.sync; the
    wgmma GEMM's grid is one-dimensional)."""
    has_mma = torch.cuda.is_available() and torch.cuda.get_device_capability() >= engine.PATH_MIN_CAPABILITY["mma"]
    cases = []
    for problem in ("84", "33"):
        for stage, precision in check.combos(algebra.STAGES, algebra.PRECISIONS):
            for mode in ("train", "eval"):
                default = _default_path(precision)
                paths = [default] + (["mma"] if precision in TC and has_mma and default != "mma" else [])
                cases += [dict(problem=problem, stage=stage, mode=mode, precision=precision, path=path,
                               shape=str(SHAPE)) for path in paths]
    for problem in ("84", "33"):
        for stage, precision in check.combos(algebra.STAGES, ("fp32", "tf32") if has_mma else ("fp32",)):
            for mode in ("train", "eval"):
                cases.append(dict(problem=problem, stage=stage, mode=mode, precision=precision,
                                  path=_default_path(precision, TALL) if precision == "fp32" else "mma",
                                  shape=str(TALL)))
    return cases


CASES = _cases()
RECORD: dict = {"large": []}
_REF_GRADS: dict = {}   # (problem, shape, device, seed) -> the float64 reference's gradients
_PEER_GRADS: dict = {}  # (…, "fp32" or "tf32") -> PyTorch's fp32 module's gradients (noise)


def _free() -> None:
    """Hand freed GPU memory back (between the phases of a case: each needs up to 7 (N, M) tensors)."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def _dy(shape: Shape, device: str) -> torch.Tensor:
    """dY = randn(N, M) on the device, the same in every case."""
    gen = torch.Generator(device=device).manual_seed(3000 + SEED)
    return torch.randn(shape.batch, shape.out_features, device=device, generator=gen)


def _grads(model: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor) -> dict[str, torch.Tensor]:
    """A train step's gradients (check.GRAD_NAMES) of model at x for dY, kept on the GPU."""
    xi = x.clone().requires_grad_()
    model(xi).backward(dy)
    params = dict(model.named_parameters())
    grads = {"x": xi.grad}
    for name in check.GRAD_NAMES[1:]:
        grads[name] = params[name].grad
        params[name].grad = None
    return grads


def _peer_grads(ref: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor, precision: str) -> dict:
    """PyTorch's fp32 module's gradients (for tf32: on X and W truncated to TF32, what its tensor
    cores read), as check.run_grad_case's noise."""
    peer = copy.deepcopy(ref).train()
    if precision == "tf32":
        with torch.no_grad():
            peer.gemm.weight.copy_(algebra.truncate_tf32(peer.gemm.weight))
        x = algebra.truncate_tf32(x)
    grads = _grads(peer, x, dy)
    del peer
    return grads


def run_large_case(problem: str, stage: str, mode: str, precision: str, path: str, shape: Shape | str = SHAPE,
                   device: str = "cuda", chunk: int | None = None) -> dict:
    """One case (module docstring; the GEMM path as the caller set it); returns its record.
    chunk: rows a chunk of the float64 reference (default: 512 MiB float64 tensors)."""
    shape = parse_shape(shape)
    chunk = chunk or max(1, 2**26 // shape.out_features)
    training = mode == "train"
    ref, gen = check.case_model(problem, shape, SEED)
    ref = ref.to(device).train(training)
    x = get_inputs(shape, "rand", gen).to(device)
    ref64 = Float64Reference(ref, x, training, chunk)  # before any forward moves the buffers
    fused = fusedlib.from_reference(ref, stage=stage, precision=precision)
    record = {"problem": problem, "stage": stage, "mode": mode, "precision": precision, "shape": str(shape),
              "seed": SEED, "input_kind": "rand", "path": path}

    # Forward: ours (with the graph in train mode), PyTorch's fp32 module, both against float64.
    xg = x.clone().requires_grad_(training)
    with torch.set_grad_enabled(training):
        y = fused(xg)
    with torch.no_grad():
        y32 = copy.deepcopy(ref)(x)
    record.update(ref64.compare(y, y32))
    del y32
    if not training:
        del y
    _free()
    noise = record["ref_fp32_rel_err"]
    bn = fused.bn
    buffer_err = max(relerr(bn.running_mean, ref64.running[0]), relerr(bn.running_var, ref64.running[1]))
    record.update(fp32_noise=noise, budget=check.case_budget(precision, noise), buffer_rel_err=buffer_err,
                  num_batches_tracked=int(bn.num_batches_tracked))
    finite = record["finite"] and bool(torch.isfinite(bn.running_mean).all() and torch.isfinite(bn.running_var).all())
    kb_ok = record["allclose_ref_fp32_1e-4"] or precision == "tf32"
    passed = (finite and record["rel_err"] <= record["budget"] and kb_ok
              and buffer_err <= max(check.BUDGET[precision], 1e-5)
              and int(bn.num_batches_tracked) == ref64.num_batches_tracked)
    record["forward_passed"] = passed

    if training:  # the backward: ours, then PyTorch's fp32 module (noise), then float64
        dy = _dy(shape, device)
        y.backward(dy)
        del y
        params = dict(fused.named_parameters())
        got = {"x": xg.grad, **{name: params[name].grad for name in check.GRAD_NAMES[1:]}}
        del xg
        _free()
        key = (problem, str(shape), device, SEED)  # the same model, x and dY in every case of the problem
        peer_key = (*key, "tf32" if precision == "tf32" else "fp32")
        if peer_key not in _PEER_GRADS:
            _PEER_GRADS[peer_key] = _peer_grads(ref, x, dy, precision)
            _free()
        peer = _PEER_GRADS[peer_key]
        if key not in _REF_GRADS:
            _REF_GRADS[key] = ref64.gradients(dy)
        want = _REF_GRADS[key]
        del dy
        _free()
        errs, ref_errs, ratios, grads_ok = {}, {}, [], True
        for name in check.GRAD_NAMES:
            g = got[name]
            if g is None:
                errs[name] = ref_errs[name] = math.nan
                grads_ok = False
                continue
            finite = finite and bool(torch.isfinite(g).all())
            ref_errs[name] = relerr(peer[name], want[name])
            if name == "gemm.bias":  # the bias cancels in train mode: exactly zero
                exact = bool(torch.equal(g, torch.zeros_like(g)))
                errs[name] = 0.0 if exact else math.inf
                grads_ok = grads_ok and exact
                continue
            errs[name] = relerr(g, want[name])
            ratios.append(errs[name] / check.case_budget(precision, ref_errs[name]))
        worst = max(ratios) if ratios else 0.0
        record.update(grad_errs=errs, ref_grad_errs=ref_errs, worst_ratio=worst)
        passed = passed and grads_ok and finite and worst <= 1.0
    record.update(finite=finite, passed=passed)
    return record


@pytest.fixture(scope="module", autouse=True)
def large_record():
    """Write RECORD["large"] at the module's end: to $FUSEDLIB_VALIDATION_OUT (a part of the
    suite, joined by run_gpu_suite), else merged into results/<gpu>/validation.json when that
    was made on the same kernel sources, else to build/validation-large.json."""
    yield
    if not RECORD["large"] or not torch.cuda.is_available():
        return
    import test_gpu
    sources = build.sources_sha256(ROOT)
    doc = {"environment": test_gpu._environment(), **RECORD, "sources_sha256": sources}
    if os.environ.get(test_gpu.OUT_VAR):
        out = Path(os.environ[test_gpu.OUT_VAR])
    else:
        out = ROOT / "results" / test_gpu._gpu_slug() / "validation.json"
        old = json.loads(out.read_text()) if out.exists() else {}
        if old.get("sources_sha256") == sources:
            doc = {"environment": old["environment"], **test_gpu.merge_records(old, RECORD),
                   "sources_sha256": sources}
        else:  # a record of this part alone must not replace the suite's
            out = ROOT / "build" / "validation-large.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c.values()))
def test_large_case_matches_float64(case, monkeypatch):
    """Beyond 32-bit indexing (N·M > 2³¹): forward, buffers and (train) gradients against
    float64 within check's budgets, on the case's GEMM path; outputs and scratch poisoned."""
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if total < NEEDED_BYTES:
        pytest.skip(f"needs a GPU with {NEEDED_BYTES >> 30} GiB of memory, this one has {total >> 30} GiB")
    monkeypatch.setenv("FUSEDLIB_POISON", "1")  # read by the operator's host code each call
    default = case["path"] == _default_path(case["precision"], parse_shape(case["shape"]))
    monkeypatch.setenv(engine.ENV_VAR, "auto" if default else case["path"])  # auto: the eager way where it applies
    try:
        result = run_large_case(**case)
    finally:
        _free()
    RECORD["large"].append(result)
    assert result["passed"], result


# ---------------------------------------------------------------------------------------- CPU


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("training", [True, False])
def test_float64_reference_is_the_module(problem, training):
    """The chunked float64 reference gives the float64 reference module's output, running
    buffers and (train mode) gradients, on chunks that do not divide the batch."""
    shape = Shape(37, 5, 11)
    ref, gen = check.case_model(problem, shape, 1)
    ref.train(training)
    x = get_inputs(shape, "randn", gen)
    dy = torch.randn(shape.batch, shape.out_features, generator=gen, dtype=torch.float64)
    mine = Float64Reference(ref, x, training, chunk=8)
    ref64 = copy.deepcopy(ref).double()
    x64 = x.double().requires_grad_()
    want = ref64(x64)
    got = torch.cat([mine.y(r) for r in mine.rows])
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
    assert mine.compare(want.float())["rel_err"] < 1e-6
    assert torch.allclose(mine.running[0], ref64.bn.running_mean, rtol=1e-12, atol=1e-14)
    assert torch.allclose(mine.running[1], ref64.bn.running_var, rtol=1e-12, atol=1e-14)
    assert mine.num_batches_tracked == int(ref64.bn.num_batches_tracked)
    if training:
        want.backward(dy)
        grads = mine.gradients(dy)
        params = dict(ref64.named_parameters())
        for name in check.GRAD_NAMES:
            w = x64.grad if name == "x" else params[name].grad
            assert torch.allclose(grads[name], w, rtol=1e-9, atol=1e-12), name


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_case_runs_on_the_cpu_at_a_small_shape(problem, mode):
    """run_large_case end to end on the CPU (the stage algebra) at a small odd shape: the
    record the GPU cases write, every check in it passing."""
    shape = Shape(67, 12, 37)
    for stage, precision in (("naive", "fp32"), ("fused", "3xtf32"), ("sums", "tf32")):
        rec = run_large_case(problem, stage, mode, precision, "cpu", shape, "cpu", chunk=16)
        assert rec["passed"] and rec["forward_passed"] and rec["shape"] == "67x12->37", rec
        assert rec["rel_err"] <= rec["budget"] and rec["buffer_rel_err"] <= 1e-5 or precision == "tf32", rec
        if mode == "train":
            assert set(rec["grad_errs"]) == set(check.GRAD_NAMES) and rec["grad_errs"]["gemm.bias"] == 0.0, rec
        json.dumps(rec)


@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("problem", ["84", "33"])
def test_python_side_takes_sizes_beyond_32_bit_indexing(problem, stage):
    """At 65537 × 64 → 32768 (N·M > 2³¹) nothing on the Python side refuses the sizes: the
    module's train forward and backward (the operator, its autograd, the backward's operator)
    and its eval forward run on the meta device (shapes only, no memory)."""
    model = fusedlib.from_reference(make_reference(problem, SHAPE.in_features, SHAPE.out_features, seed=0),
                                    stage=stage, precision="3xtf32").to("meta")
    x = torch.empty(SHAPE.batch, SHAPE.in_features, device="meta", requires_grad=True)
    y = model(x)
    assert y.shape == (SHAPE.batch, SHAPE.out_features) and y.numel() > 2**31
    y.backward(torch.empty_like(y))
    assert x.grad.shape == x.shape and model.gemm.weight.grad.shape == model.gemm.weight.shape
    model.eval()
    with torch.no_grad():
        assert model(x.detach()).shape == y.shape


def test_host_code_refuses_no_product_of_sizes():
    """The operators' host code checks single dimensions (kMaxDim), never a product of two
    against 2³¹ (N·M, N·K, M·K: every offset along them is 64-bit)."""
    for name in (build.HOST, build.BACKWARD_HOST, build.HOST_COMMON):
        text = (build.KERNEL_DIR / name).read_text()
        assert "INT32_MAX" not in text and "32-bit indexing are not supported" not in text, name
        assert not re.search(r"\b[nmk]\s*\*\s*(std::max\([^)]*\)|[nmk])\s*<", text), name


def test_suite_runs_the_large_part():
    """tests/run_gpu_suite.py runs this file as its part "large" and its records are merged."""
    import run_gpu_suite
    import test_gpu
    assert run_gpu_suite.PART_FILES["large"] == "tests/test_gpu_large.py" and "large" in run_gpu_suite.PARTS
    row = {"problem": "84", "stage": "fused", "mode": "train", "precision": "tf32", "shape": str(SHAPE), "seed": 0,
           "input_kind": "rand", "path": "mma", "rel_err": 1e-3, "passed": True}
    merged = test_gpu.merge_records({"large": [dict(row, path="wgmma"), dict(row, passed=False)]}, {"large": [row]})
    assert merged["large"] == [dict(row, path="wgmma"), row]
