"""Mixed precision (docs/design.md §15): modules in bf16 or fp16 (``module.to(dtype)``) and fp32
modules under ``torch.autocast``, every stage, train and eval mode, on the CPU and (marked gpu)
on CUDA, against eager
PyTorch's same model in the same setting: the output's dtype, and the output, the running
buffers and every gradient within twice eager's own error against float64. Errors are the root
mean square over SEEDS fresh cases: a single case's error of a sum that cancels (84's scale
gradient) swings by 10× between seeds for eager and fused alike; the mean does not. The
dtype's unit roundoff is the floor (eager's error can be smaller still). On CUDA (``pytest -m
gpu``) each such comparison is recorded under "mixed_precision" in results/<gpu>/validation.json
(tests/run_gpu_suite.py's part "mixed"): the case, every quantity's two errors and the worst ratio
of the module's error to its budget."""
from __future__ import annotations

import copy

import pytest
import torch

import fusedlib
from fusedlib import cuda
from fusedlib.reference import make_reference

DTYPES = (torch.bfloat16, torch.float16)
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
RECORD: dict = {"mixed_precision": []}
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


def _case(kind: str, training: bool, shape=(32, 64, 48), seed: int = 0):
    """The model (PyTorch fp32), x (N, K), dY (N, M) and the float64 step's results; shape (N, K, M)."""
    n, k, m = shape
    ref = make_reference(kind, k, m, seed=seed)
    for _ in range(2):  # running buffers away from their initial values
        ref(torch.rand(40, k, generator=torch.Generator().manual_seed(seed + 7)))
    g = torch.Generator().manual_seed(seed + 1)
    x, dy = torch.randn(n, k, generator=g), torch.randn(n, m, generator=g)
    return ref, x, dy, _step(copy.deepcopy(ref).double(), x.double(), dy.double(), training)


def _rms_errors(run, seeds=SEEDS) -> dict:
    """Root mean square over ``seeds`` of each quantity's error against float64; ``run(ref, x,
    dy)`` returns the step's dict."""
    total: dict = {}
    for seed in seeds:
        ref, x, dy, want = _case(*run.case, seed=seed)  # (kind, training[, shape])
        for k, v in run(ref, x, dy).items():
            total[k] = total.get(k, 0.0) + _err(v, want[k]) ** 2 / len(seeds)
    return {k: v ** 0.5 for k, v in total.items()}


def _within_twice_eager(got: dict, eager: dict, dtype) -> dict:
    return {k: (got[k], eager[k]) for k in eager if not got[k] <= max(2 * eager[k], UNIT[dtype])}


def _judge(got: dict, eager: dict, dtype, device: str, **case) -> None:
    """Every quantity of ``got`` within twice ``eager``'s error (the dtype's unit roundoff the
    floor); on CUDA the comparison is recorded (``case``: test, problem, stage, mode, path, shape)."""
    bad = _within_twice_eager(got, eager, dtype)
    if device == "cuda":
        ratios = {k: got[k] / max(2 * eager[k], UNIT[dtype]) for k in eager}
        RECORD["mixed_precision"].append({
            **case, "dtype": DTYPE_NAMES[dtype], "device": torch.cuda.get_device_name(),
            "errors": {k: [got[k], eager[k]] for k in eager}, "unit": UNIT[dtype],
            "worst_ratio": max(ratios.values()), "passed": not bad})
    assert not bad, f"(fused, eager) errors against float64 beyond twice eager's: {bad}"


@pytest.fixture(scope="module", autouse=True)
def mixed_precision_record():
    """On CUDA, the module's record written at its end, as tests/test_training.py writes its own."""
    yield
    if torch.cuda.is_available() and RECORD["mixed_precision"]:
        from test_training import write_record
        write_record(RECORD)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_module_in_low_precision_within_twice_eager(stage, kind, training, dtype, device):
    """(CUDA: the 16-bit tensor-core kernels, K = 64 being a multiple of 8: modules._sixteen_bit.)"""
    def eager(ref, x, dy):
        return _step(copy.deepcopy(ref).to(dtype), x.to(device, dtype), dy, training)

    def fused(ref, x, dy):
        module = fusedlib.from_reference(ref, stage=stage).to(dtype)
        out = _step(module, x.to(device, dtype), dy, training)
        assert out["y"].dtype == dtype and module.bn.running_mean.dtype == dtype
        assert all(p.grad is None or p.grad.dtype == dtype for p in module.parameters())
        return out

    eager.case = fused.case = (kind, training)
    _judge(_rms_errors(fused), _rms_errors(eager), dtype, device, test="module", problem=kind, stage=stage,
           mode="train" if training else "eval", path="auto", shape="32x64->48")


class _Float32Route(torch.nn.Module):
    """A module whose forward is CUDA's float32 way for bf16/fp16 (``_sixteen_bit`` where the
    16-bit kernels do not run: the float32 kernels on converted tensors), run on the CPU."""

    def __init__(self, module):
        super().__init__()
        self.module, self.bn = module, module.bn

    def forward(self, x):
        m = self.module
        return m._sixteen_bit(x, m._tensors(), False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
def test_the_float32_route_of_cuda_within_twice_eager(kind, training, dtype):
    """CUDA's float32 way for a bf16/fp16 module (the float32 kernels on the exactly converted
    tensors, where the 16-bit kernels do not run: ``modules._sixteen_bit``), run on the CPU
    through the float32 operators: the output and
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
    _judge(got, _rms_errors(eager), dtype, device, test="autocast", problem=kind, stage=stage,
           mode="train" if training else "eval", path="auto", shape="32x64->48")
    assert got["y"] > 10 * _rms_errors(plain, SEEDS[:1])["y"]


# The 16-bit kernels on the GPU: each tensor-core path at shapes with edges (N and M not
# multiples of the tiles, K a multiple of 8 but not of a stage's 64 or 32 elements, K = 8),
# and a shape of few tiles, where the wgmma GEMM splits K (KernelBench v0, 128 × 1024 → 512).
SHAPES16 = [(300, 200, 333), (257, 8, 130), (128, 1024, 512)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES16, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("path", ["mma", "wgmma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_sixteen_bit_kernels_on_each_path_within_twice_eager(stage, kind, training, dtype, path, shape, monkeypatch):
    """Each GEMM path with 16-bit operands (FUSEDLIB_GEMM_PATH; wgmma needs sm_90a): output,
    buffers and gradients within twice eager's error in the dtype, over two seeds."""
    if path == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a only")
    monkeypatch.setenv(fusedlib.engine.ENV_VAR, path)

    def eager(ref, x, dy):
        return _step(copy.deepcopy(ref).to(dtype), x.to("cuda", dtype), dy, training)

    def fused(ref, x, dy):
        module = fusedlib.from_reference(ref, stage=stage).to(dtype)
        out = _step(module, x.to("cuda", dtype), dy, training)
        assert out["y"].dtype == dtype and module.bn.running_mean.dtype == dtype
        return out

    eager.case = fused.case = (kind, training, shape)
    _judge(_rms_errors(fused, SEEDS[:2]), _rms_errors(eager, SEEDS[:2]), dtype, "cuda", test="path", problem=kind,
           stage=stage, mode="train" if training else "eval", path=path, shape="{}x{}->{}".format(*shape))


def _gemm_kernels(fn) -> set:
    """Names of the GEMM kernels (names holding 'gemm_kernel') that ``fn()`` launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if "gemm_kernel" in e.name}


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["mma", "wgmma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_sixteen_bit_module_runs_the_sixteen_bit_kernels(dtype, path, monkeypatch):
    """The route is taken: a bf16/fp16 module launches other GEMM instantiations than the same
    module in float32 at tf32 (the 16-bit ones), on each path; and a module whose in_features is
    not a multiple of 8 takes the float32 kernels (the same ones as float32 at tf32)."""
    if path == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a only")
    monkeypatch.setenv(fusedlib.engine.ENV_VAR, path)
    for k, sixteen in ((64, True), (60, False)):
        ref = make_reference("84", k, 48, seed=0)
        module = fusedlib.from_reference(ref, stage="fused", precision="tf32").cuda().eval()
        x = torch.randn(32, k, device="cuda")
        with torch.no_grad():
            f32 = _gemm_kernels(lambda: module(x))
            low = _gemm_kernels(lambda: module.to(dtype)(x.to(dtype)))
        assert f32 and low, (f32, low)
        assert (low.isdisjoint(f32) if sixteen else low == f32), (k, f32, low)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_the_eager_call_of_a_sixteen_bit_module_gives_the_operators_bits(stage, kind, training, dtype):
    """Called without a gradient, a bf16/fp16 module takes the C++ eager call (its vectors cast to
    float32 there, in one cat and one cast); with one, the operator through the dispatcher, after
    ``modules._sixteen_bit``'s casts. The same kernels on the same float32 vectors: Y (in the
    dtype), the running buffers and num_batches_tracked bit for bit, over three calls."""
    ref, x, _, _ = _case(kind, training, shape=(200, 64, 96))
    x = x.to("cuda", dtype)
    results = []
    for grad in (False, True):
        module = fusedlib.from_reference(ref, stage=stage).to(dtype).cuda().train(training)
        bn = module.bn
        if not grad:  # the eager call is taken (None: it declined), on a copy
            probe = copy.deepcopy(module)
            with torch.no_grad():
                y = cuda.eager_forward(probe, x, probe._tensors(), bn.eps, bn.momentum)
            assert y is not None and y.dtype == dtype
        ys = []
        for _ in range(3):
            with torch.set_grad_enabled(grad):
                ys.append(module(x.clone().requires_grad_(grad)).detach())
        results.append((*ys, bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()))
    for i, (a, b) in enumerate(zip(*results)):
        assert a.dtype == b.dtype and torch.equal(a, b), i


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_misaligned_sixteen_bit_operand_gives_the_same_bits(dtype):
    """x a view 2 bytes past an aligned address (TMA and cp.async need 16): the operator copies it,
    and the output, the running buffers and the gradients are the aligned call's, bit for bit."""
    ref, x, dy, _ = _case("33", True, shape=(200, 64, 96))
    outs = []
    for offset in (0, 1):
        module = fusedlib.from_reference(ref, stage="fused").to(dtype).cuda().train()
        buf = torch.empty(x.numel() + offset, dtype=dtype, device="cuda")
        xm = buf[offset:].view(x.shape)
        xm.copy_(x)
        assert (xm.data_ptr() % 16 == 0) == (offset == 0)
        outs.append(_step(module, xm, dy, True))
    for name in outs[0]:
        assert torch.equal(outs[0][name], outs[1][name]), name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind,stage", [("84", "fused"), ("33", "sums")])
def test_a_compiled_sixteen_bit_module_matches_eager(kind, stage, dtype):
    """torch.compile (fullgraph) of a bf16/fp16 module over three train steps and an eval step:
    the compiled module takes the 16-bit kernels as eager does (the route reads no address), so
    outputs and buffers equal eager's and gradients agree to the dtype's rounding."""
    torch._dynamo.reset()  # the other compiled modules of the class in this process: no recompile limit
    ref = make_reference(kind, 64, 48, seed=3)
    eager = fusedlib.from_reference(ref, stage=stage).to(dtype).cuda()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, fullgraph=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for step in range(4):
        if step == 3:
            eager.eval(), model.eval()
        x = torch.rand(40, 64, device="cuda", generator=gen).to(dtype)
        y_eager, y_compiled = eager(x), compiled(x)
        assert y_compiled.dtype == dtype and torch.equal(y_compiled, y_eager), step
        if step < 3:
            for y in (y_eager, y_compiled):
                y.float().square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        assert q.grad.dtype == dtype and torch.allclose(q.grad.float(), p.grad.float(), rtol=UNIT[dtype],
                                                        atol=UNIT[dtype] * p.grad.abs().max().item()), name
    for name, buf in eager.named_buffers():
        assert torch.equal(buf, dict(model.named_buffers())[name]), name
