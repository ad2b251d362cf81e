"""Mixed precision (docs/design.md §15): modules in bf16 or fp16 (``module.to(dtype)``) and fp32
modules under ``torch.autocast``, every stage, train and eval mode, on the CPU and (marked gpu)
on CUDA, against eager
PyTorch's same model in the same setting: the output's dtype, and the output, the running
buffers and every gradient within twice eager's own error against float64. Errors are the root
mean square over SEEDS fresh cases: a single case's error of a sum that cancels (84's scale
gradient) swings by 10× between seeds for eager and fused alike; the mean does not. The
dtype's unit roundoff is the floor (eager's error can be smaller still)."""
from __future__ import annotations

import copy

import pytest
import torch

import fusedlib
from fusedlib.reference import make_reference

DTYPES = (torch.bfloat16, torch.float16)
SEEDS = range(4)
#: Unit roundoff of each dtype: the floor of the budget (eager's error can be near zero by chance).
UNIT = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11}


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double()
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-300)).item()


def _step(model, x: torch.Tensor, dy: torch.Tensor, training: bool, autocast=None) -> dict:
    """A forward (and in train mode a backward for dY) of ``model`` on x's device; the output,
    buffers and gradients, on the CPU."""
    model = model.to(x.device).train(training)
    x = x.clone().requires_grad_(training)
    if autocast is None:
        y = model(x)
    else:
        with torch.autocast(x.device.type, dtype=autocast):
            y = model(x)
    out = {"y": y.detach(), "running_mean": model.bn.running_mean.clone(), "running_var": model.bn.running_var.clone()}
    if training:
        y.backward(dy.to(device=y.device, dtype=y.dtype))
        out["dx"] = x.grad
        out.update({f"d {name}": p.grad for name, p in model.named_parameters() if name != "gemm.bias"})
    return {k: v.cpu() for k, v in out.items()}


def _case(kind: str, training: bool, seed: int = 0):
    ref = make_reference(kind, 64, 48, seed=seed)
    for _ in range(2):  # running buffers away from their initial values
        ref(torch.rand(40, 64, generator=torch.Generator().manual_seed(seed + 7)))
    g = torch.Generator().manual_seed(seed + 1)
    x, dy = torch.randn(32, 64, generator=g), torch.randn(32, 48, generator=g)
    return ref, x, dy, _step(copy.deepcopy(ref).double(), x.double(), dy.double(), training)


def _rms_errors(run, seeds=SEEDS) -> dict:
    """Root mean square over ``seeds`` of each quantity's error against float64; ``run(ref, x,
    dy)`` returns the step's dict."""
    total: dict = {}
    for seed in seeds:
        ref, x, dy, want = _case(*run.case, seed=seed)
        for k, v in run(ref, x, dy).items():
            total[k] = total.get(k, 0.0) + _err(v, want[k]) ** 2 / len(seeds)
    return {k: v ** 0.5 for k, v in total.items()}


def _within_twice_eager(got: dict, eager: dict, dtype) -> dict:
    return {k: (got[k], eager[k]) for k in eager if not got[k] <= max(2 * eager[k], UNIT[dtype])}


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_module_in_low_precision_within_twice_eager(stage, kind, training, dtype, device):
    """(CUDA: the float32 kernels on the exactly converted tensors, modules._float32_kernels.)"""
    def eager(ref, x, dy):
        return _step(copy.deepcopy(ref).to(dtype), x.to(device, dtype), dy, training)

    def fused(ref, x, dy):
        module = fusedlib.from_reference(ref, stage=stage).to(dtype)
        out = _step(module, x.to(device, dtype), dy, training)
        assert out["y"].dtype == dtype and module.bn.running_mean.dtype == dtype
        assert all(p.grad is None or p.grad.dtype == dtype for p in module.parameters())
        return out

    eager.case = fused.case = (kind, training)
    bad = _within_twice_eager(_rms_errors(fused), _rms_errors(eager), dtype)
    assert not bad, f"(fused, eager) errors against float64 beyond twice eager's: {bad}"


class _Float32Route(torch.nn.Module):
    """A module whose forward is CUDA's way for bf16/fp16 (``_float32_kernels``), run on the CPU."""

    def __init__(self, module):
        super().__init__()
        self.module, self.bn = module, module.bn

    def forward(self, x):
        m = self.module
        return m._float32_kernels(x, m._tensors(), False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
def test_the_float32_route_of_cuda_within_twice_eager(kind, training, dtype):
    """CUDA's way for a bf16/fp16 module (the float32 kernels on the exactly converted tensors,
    ``modules._float32_kernels``), run on the CPU through the float32 operators: the output and
    the running buffers in the module's dtype, every gradient in its parameter's, each within
    twice eager's error (what the CUDA test then checks on the kernels)."""
    def eager(ref, x, dy):
        return _step(copy.deepcopy(ref).to(dtype), x.to(dtype), dy, training)

    def route(ref, x, dy):
        module = fusedlib.from_reference(ref, stage="fused").to(dtype)
        out = _step(_Float32Route(module), x.to(dtype), dy, training)
        assert out["y"].dtype == dtype and module.bn.running_mean.dtype == dtype
        assert all(p.grad is None or p.grad.dtype == dtype for p in module.parameters())
        return {k.replace("d module.", "d "): v for k, v in out.items() if k != "d module.gemm.bias"}

    eager.case = route.case = (kind, training)
    bad = _within_twice_eager(_rms_errors(route), _rms_errors(eager), dtype)
    assert not bad, f"(route, eager) errors against float64 beyond twice eager's: {bad}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", ["naive", "fused"])
def test_autocast_computes_what_eager_autocast_computes(stage, kind, training, dtype, device):
    """fp32 parameters under torch.autocast("cpu"): the Linear in the autocast dtype, the rest in
    fp32 and the output fp32 (the scale parameter promotes), as eager autocast; buffers and
    gradients stay fp32; and autocast does change the GEMM (the error is that of the dtype)."""
    def eager(ref, x, dy):
        return _step(copy.deepcopy(ref), x.to(device), dy, training, autocast=dtype)

    def fused(ref, x, dy):
        module = fusedlib.from_reference(ref, stage=stage)
        out = _step(module, x.to(device), dy, training, autocast=dtype)
        assert out["y"].dtype == torch.float32 and module.bn.running_mean.dtype == torch.float32
        assert all(p.grad is None or p.grad.dtype == torch.float32 for p in module.parameters())
        return out

    def plain(ref, x, dy):
        return _step(fusedlib.from_reference(ref, stage=stage), x.to(device), dy, training)

    eager.case = fused.case = plain.case = (kind, training)
    got = _rms_errors(fused)
    bad = _within_twice_eager(got, _rms_errors(eager), dtype)
    assert not bad, f"(fused, eager) errors against float64 beyond twice eager's: {bad}"
    assert got["y"] > 10 * _rms_errors(plain, SEEDS[:1])["y"]
