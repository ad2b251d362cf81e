"""Mixed precision (docs/design.md §15): modules in bf16 or fp16 (``module.to(dtype)``) and fp32
modules under ``torch.autocast``, every stage, train and eval mode, on the CPU and (marked gpu)
on CUDA, against eager
PyTorch's same model in the same setting: the output's dtype, and the output, the running
buffers and every gradient within twice eager's own error against float64. Errors are the root
mean square over SEEDS fresh cases of each case's normwise relative error, with one exception:
84's scale gradient is one sum over N·M terms of both signs (|Σ| down to 0.5 % of Σ|terms| at these
seeds), and its error relative to |Σ| swings by 10× and more between seeds for eager and fused
alike, so one nearly cancelling seed decided the mean. Its error is taken relative to Σ|terms|
instead (the sum's condition: Higham, Accuracy and Stability of Numerical Algorithms, §4.2), with
the floor scaled to match: each case is judged as before, the cases are weighted by their terms'
size rather than by 1 / |Σ|. The dtype's unit roundoff (of the value, for the scale gradient) is
the floor (eager's error can be smaller still). On CUDA (``pytest -m
gpu``) each such comparison is recorded under "mixed_precision" in results/<gpu>/validation.json
(tests/run_gpu_suite.py's part "mixed"): the case, every quantity's two errors and the worst ratio
of the module's error to its budget."""
from __future__ import annotations

import contextlib
import copy
import functools

import pytest
import torch

import fusedlib
from fusedlib import cuda, ops
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


#: The key of a quantity's condition in a float64 step's results: Σ|terms| of a sum that cancels.
TERMS = "|terms| of "


class Errors(dict):
    """Root mean square errors by quantity; ``floor[k]``: the unit roundoff's factor in quantity
    k's units (1 for normwise relative errors; for 84's scale gradient the root mean square of
    |Σ| / Σ|terms|, so that an error within one unit roundoff of the value still passes)."""

    def __init__(self, *args, floor=None):
        super().__init__(*args)
        self.floor = floor or {}


def _keep_bn_output(model) -> list:
    """A list that ``model``'s next forward fills with its BatchNorm's output H, its gradient
    retained: after the backward, 84's scale gradient dL/ds = Σ_ij ∂L/∂U_ij · H_ij (U = s·H, the
    softmax's input) has terms H.grad · H / s."""
    h = []

    def keep(module, inputs, out):  # (returns None: the output unchanged)
        out.retain_grad()
        h.append(out)

    model.bn.register_forward_hook(keep)
    return h


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
    model = copy.deepcopy(ref).double()
    h = _keep_bn_output(model)
    want = _step(model, x.double(), dy.double(), training)
    if kind == "84" and training:  # Σ|terms| of the scale gradient, from the same step
        want[TERMS + "d scale"] = (h[0].grad * h[0]).abs().sum().item() / model.scale.abs().item()
    return ref, x, dy, want


@functools.lru_cache(maxsize=None)
def _float64_case(kind: str, training: bool, shape=(32, 64, 48), seed: int = 0):
    """:func:`_case`, made once for every test that judges it (:func:`_rms_errors` hands each run a
    copy of the model)."""
    return _case(kind, training, shape, seed)


def _rms_errors(run, seeds=SEEDS) -> dict:
    """Root mean square over ``seeds`` of each quantity's error against float64; ``run(ref, x,
    dy)`` returns the step's dict."""
    total: dict = {}
    floor: dict = {}
    for seed in seeds:
        ref, x, dy, want = _float64_case(*run.case, seed=seed)  # (kind, training[, shape])
        for k, v in run(copy.deepcopy(ref), x, dy).items():  # (a copy: the case is shared)
            if TERMS + k in want:  # a sum that cancels: relative to Σ|terms| (the module's docstring)
                terms = want[TERMS + k]
                e = (v.double() - want[k].double()).abs().max().item() / terms
                floor[k] = floor.get(k, 0.0) + (want[k].double().abs().max().item() / terms) ** 2 / len(seeds)
            else:
                e = _err(v, want[k])
            total[k] = total.get(k, 0.0) + e ** 2 / len(seeds)
    return Errors({k: v ** 0.5 for k, v in total.items()}, floor={k: v ** 0.5 for k, v in floor.items()})


def _budget(eager: Errors, k: str, dtype) -> float:
    """Twice eager's error of quantity k, one unit roundoff (in k's units) the floor."""
    return max(2 * eager[k], UNIT[dtype] * eager.floor.get(k, 1.0))


def _within_twice_eager(got: dict, eager: Errors, dtype) -> dict:
    return {k: (got[k], eager[k]) for k in eager if not got[k] <= _budget(eager, k, dtype)}


def _judge(got: dict, eager: dict, dtype, device: str, **case) -> None:
    """Every quantity of ``got`` within twice ``eager``'s error (the dtype's unit roundoff the
    floor); on CUDA the comparison is recorded (``case``: test, problem, stage, mode, path, shape)."""
    bad = _within_twice_eager(got, eager, dtype)
    if device == "cuda":
        ratios = {k: got[k] / _budget(eager, k, dtype) for k in eager}
        RECORD["mixed_precision"].append({
            **case, "dtype": DTYPE_NAMES[dtype], "device": torch.cuda.get_device_name(),
            "errors": {k: [got[k], eager[k]] for k in eager}, "unit": UNIT[dtype], "unit_factor": eager.floor,
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
        return m._sixteen_bit(x, m._tensors(), None)


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
@pytest.mark.parametrize("stage", fusedlib.STAGES)
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
#: The path test's seeds: 16, not SEEDS' 4. On the H200 at four seeds, eager's error of 84's
#: scale gradient (relative to Σ|terms|) swung 3.5× between these shapes (bf16: 2.7e-5 to 9.4e-5)
#: while the fused stage's stayed at 6–8e-5, so one shape's lucky eager failed a comparison that
#: the other two passed with room. Eager's errors, which depend on neither stage nor path, are
#: taken once (_eager_path_errors), and the float64 cases once (_float64_case).
PATH_SEEDS = range(16)


@functools.lru_cache(maxsize=None)
def _eager_path_errors(kind: str, training: bool, shape: tuple, dtype) -> Errors:
    """Eager PyTorch's errors in ``dtype`` on CUDA over PATH_SEEDS (the path test's budget)."""
    def eager(ref, x, dy):
        return _step(ref.to(dtype), x.to("cuda", dtype), dy, training)

    eager.case = (kind, training, shape)
    return _rms_errors(eager, PATH_SEEDS)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES16, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("path", ["mma", "wgmma", "wgmma-wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_sixteen_bit_kernels_on_each_path_within_twice_eager(stage, kind, training, dtype, path, shape, monkeypatch):
    """Each GEMM path with 16-bit operands (FUSEDLIB_GEMM_PATH; wgmma needs sm_90a): output,
    buffers and gradients within twice eager's error in the dtype, over PATH_SEEDS. At these shapes
    the wgmma GEMM takes its narrow tile (128 × 64); ``wgmma-wide`` forces its 128 × 256 tile
    (FUSEDLIB_WGMMA_WIDTH=256), the KernelBench shapes' own."""
    if path.startswith("wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a only")
    monkeypatch.setenv(fusedlib.engine.ENV_VAR, path.split("-")[0])
    if path == "wgmma-wide":
        monkeypatch.setenv("FUSEDLIB_WGMMA_WIDTH", "256")

    def fused(ref, x, dy):
        module = fusedlib.from_reference(ref, stage=stage).to(dtype)
        out = _step(module, x.to("cuda", dtype), dy, training)
        assert out["y"].dtype == dtype and module.bn.running_mean.dtype == dtype
        return out

    fused.case = (kind, training, shape)
    _judge(_rms_errors(fused, PATH_SEEDS), _eager_path_errors(kind, training, shape, dtype), dtype, "cuda",
           test="path", problem=kind,
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


def test_converted_sixteen_bit_operands_run_at_tf32_where_the_gpu_has_it():
    """A 16-bit module's operands converted to float32 (no 16-bit kernels, or a process group)
    multiply exactly at any precision (a bf16 or fp16 value is a TF32 value): TF32 from compute
    capability 8.0 on, whatever the module's precision, instead of the fp32 SIMT GEMM or 3xTF32's
    three products; the module's precision below 8.0, where TF32 does not run."""
    for precision in fusedlib.PRECISIONS:
        assert fusedlib.engine.widened_precision(precision, (8, 0)) == "tf32"
        assert fusedlib.engine.widened_precision(precision, (9, 0)) == "tf32"
        assert fusedlib.engine.widened_precision(precision, (7, 5)) == precision


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_converted_sixteen_bit_operands_take_the_tf32_kernels(dtype):
    """Where the 16-bit kernels do not run (in_features 60, not a multiple of 8), a bf16/fp16 module
    at precision fp32 and a float32 module at fp32 under autocast launch the GEMM kernels of a float32
    module at tf32 (engine.widened_precision), not the fp32 SIMT GEMM."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability 8.0")
    ref = make_reference("84", 60, 48, seed=0)
    tf32 = fusedlib.from_reference(ref, stage="fused", precision="tf32").cuda().eval()
    fp32 = fusedlib.from_reference(ref, stage="fused", precision="fp32").cuda().eval()
    low = copy.deepcopy(fp32).to(dtype)
    x = torch.randn(32, 60, device="cuda")
    with torch.no_grad():
        want, simt = _gemm_kernels(lambda: tf32(x)), _gemm_kernels(lambda: fp32(x))
        got = _gemm_kernels(lambda: low(x.to(dtype)))
        with torch.autocast("cuda", dtype=dtype):
            autocast = _gemm_kernels(lambda: fp32(x))
    assert want and simt.isdisjoint(want), (want, simt)
    assert got == want and autocast == want, (want, got, autocast)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_the_eager_call_of_a_sixteen_bit_module_gives_the_operators_bits(stage, kind, training, dtype):
    """Called without a gradient, a bf16/fp16 module takes the C++ eager call; with one, the same
    call with its C++ autograd node in train mode, the operator through the dispatcher and autograd
    in eval mode. Either way the kernels read the vectors in their dtype and write the running
    buffers back in it. The same kernels on the same vectors: Y (in the dtype), the running buffers
    and num_batches_tracked bit for bit, over three calls."""
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


def _module_and_operator(ref, stage, module_dtype, training, x, dy, calls, autocast=None):
    """The same calls through the module (its eager C++ call) and through the operator with the
    module's tensors, each route on a fresh module from ``ref`` in ``module_dtype``; ``calls``:
    (x requires grad, W frozen, grad mode) each), under ``torch.autocast`` to ``autocast`` unless
    None: each route's records (per call: Y, the running buffers, num_batches_tracked and
    the gradients of x and the parameters, -1 where None), asserted bit for bit the same, and each
    call's autograd node: its name on the module's route, its Python Function class (or None) on
    the operator's; returns the nodes and the module route's records."""
    records, nodes = [], []
    for route in ("module", "operator"):
        module = fusedlib.from_reference(ref, stage=stage).to(module_dtype).cuda().train(training)
        bn = module.bn
        params = (module.gemm.weight, module.gemm.bias, module.scale, bn.weight, bn.bias)
        out, seen = [], []
        for need_dx, frozen, grad in calls:
            module.zero_grad(set_to_none=True)
            module.gemm.weight.requires_grad_(not frozen)
            xi = x.clone().requires_grad_(need_dx)
            with torch.autocast("cuda", dtype=autocast or torch.bfloat16, enabled=autocast is not None), \
                    torch.set_grad_enabled(grad):
                if route == "module":
                    y = module(xi)
                    seen.append(y.grad_fn.name() if y.grad_fn is not None else None)
                else:
                    y = ops.OPS[stage](xi, *module._tensors(), module._kind, module._precision, training, bn.eps,
                                       bn.momentum)
                    seen.append(getattr(y.grad_fn, "_forward_cls", None))
            if grad:
                y.backward(dy)
            out += [y.detach(), bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]
            out += [torch.full((1,), -1.0) if t.grad is None else t.grad for t in (xi, *params)]
        records.append(out)
        nodes.append(seen)
    for i, (a, b) in enumerate(zip(*records)):
        assert a.dtype == b.dtype and torch.equal(a, b), i
    return nodes, records[0]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_a_sixteen_bit_train_step_takes_the_cpp_node_with_the_operators_bits(stage, kind, dtype):
    """A bf16/fp16 module in train mode called with a gradient takes the eager call's C++ autograd
    node (its backward one C++ call, torch.ops.fusedlib.backward_sixteen); the operator called
    with the same tensors takes the Python autograd function (ops.StageFunction). Over three steps
    (x requiring grad, then not, then W frozen too): Y, the running buffers, num_batches_tracked
    and every gradient (None where none is asked) bit for bit the same either way."""
    ref, x, dy, _ = _case(kind, True, shape=(200, 64, 96))
    calls = ((True, False, True), (False, False, True), (False, True, True))
    (module, operator), _ = _module_and_operator(ref, stage, dtype, True, x.to("cuda", dtype), dy.to("cuda", dtype),
                                                 calls)
    assert all("SixteenBitTrain" in name for name in module), module
    assert all(cls is ops.StageFunction for cls in operator), operator


@pytest.mark.gpu
@pytest.mark.parametrize("autocast", [False, True], ids=["module-bf16", "autocast-bf16"])
def test_create_graph_through_the_cpp_node_is_refused(autocast):
    """A backward that would itself be differentiated (create_graph=True) through the 16-bit train
    step's C++ node raises, naming what to do, rather than returning a gradient without its graph
    (a gradient penalty dropped without a word); a first-order backward is unaffected."""
    ref, x, _, _ = _case("84", True, shape=(64, 32, 48))
    module = fusedlib.from_reference(ref, stage="fused").cuda()
    if not autocast:
        module = module.to(torch.bfloat16)
    xi = x.to("cuda", torch.float32 if autocast else torch.bfloat16).requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        y = module(xi)
        assert "SixteenBitTrain" in y.grad_fn.name(), y.grad_fn.name()
        with pytest.raises(RuntimeError, match="create_graph=True"):
            torch.autograd.grad(y.float().pow(2).sum(), xi, create_graph=True)
        (g,) = torch.autograd.grad(module(xi).float().pow(2).sum(), xi)
    assert g.dtype == xi.dtype and not g.requires_grad and torch.isfinite(g).all()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "3xtf32"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_a_gradient_penalty_on_cuda_matches_the_reference(precision, training):
    """A float32 module on CUDA under a gradient penalty (create_graph=True; ops.StageFunction's
    differentiable backward): every parameter's gradient and x's against autograd through the
    reference model in float64, within the precision's budget (tf32: TF32's)."""
    ref, x, _, _ = _case("33", training, shape=(64, 32, 48))
    module = fusedlib.from_reference(ref, stage="fused", precision=precision).cuda().train(training)
    r = torch.linspace(-1, 1, 64 * 48).reshape(64, 48).cos()

    def grads(model, x, r):
        xi = x.clone().requires_grad_()
        y = model(xi)
        (g,) = torch.autograd.grad((y * r).sum(), xi, create_graph=True)
        ((y * r).sum() + g.pow(2).sum()).backward()
        return {"x": xi.grad, **{k: p.grad for k, p in model.named_parameters()}}

    want = grads(copy.deepcopy(ref).double().train(training), x.double(), r.double())
    got = grads(module, x.cuda(), r.cuda())
    budget = 1e-2 if precision == "tf32" else 1e-5
    for name, w in want.items():
        if name == "gemm.bias" and training:
            assert torch.equal(got[name], torch.zeros_like(got[name]))
            continue
        err = ((got[name].double().cpu() - w).norm() / w.norm()).item()
        assert err < budget, (name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", ["naive", "fused"])
def test_autocast_takes_the_eager_call_with_the_rules_bits(stage, kind, training, dtype):
    """Under torch.autocast a float32 module's call takes the C++ eager call, which applies the
    operators' autocast rule itself (x and W in the autocast dtype, b rounded to it and back to
    float32), with its C++ autograd node in train mode; the operator called under autocast with the
    same tensors takes the rule, then the Python autograd function. Two steps with a gradient and
    one call without: Y (float32), the running buffers and every gradient bit for bit the same."""
    ref, x, dy, _ = _case(kind, training, shape=(200, 64, 96))
    calls = ((True, False, True), (False, False, True), (False, False, False))
    (module, _), records = _module_and_operator(ref, stage, torch.float32, training, x.cuda(), dy.cuda(), calls,
                                                autocast=dtype)
    assert all("SixteenBitTrain" in name for name in module[:2]) if training else module[2] is None, module
    assert all(records[i].dtype == torch.float32 for i in range(0, len(records), 10))  # each call's Y


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind,stage", [("84", "fused"), ("33", "sums")])
def test_autocast_takes_a_16_bit_input_on_cuda(kind, stage, training, dtype):
    """Under torch.autocast a float32 module given x already in the autocast dtype (the layer
    before it ran under autocast too) computes what it computes from the float32 x that rounds
    to it: the same Y, running buffers and gradients, bit for bit (x's cast is the autocast rule's
    either way; a 16-bit x takes the operator, a float32 x the C++ eager call with the rule's bits)."""
    ref, x, dy, _ = _case(kind, training, shape=(200, 64, 96))
    x16 = x.cuda().to(dtype)
    runs = []
    for given in (x16, x16.float()):
        module = fusedlib.from_reference(copy.deepcopy(ref), stage=stage).cuda().train(training)
        xg = given.clone().requires_grad_()
        with torch.autocast("cuda", dtype=dtype):
            y = module(xg)
        (y.float() * dy.cuda()).sum().backward()
        runs.append([y.detach(), xg.grad.float(), module.bn.running_mean.clone(), module.bn.running_var.clone()]
                    + [p.grad.clone() for p in module.parameters() if p.grad is not None])
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind,stage", [("84", "fused"), ("33", "sums")])
def test_a_compiled_float32_module_under_autocast_matches_eager_autocast(kind, stage, dtype):
    """torch.compile (fullgraph) of a float32 module called under torch.autocast, three train steps
    and an eval step: the compiled graph replays the operator's call without autocast, with the
    float32 master weight beside a 16-bit x (ops._master_cast decides by the dtypes alone), so Y
    and the buffers equal the eager module's under autocast (its C++ call: the operator's bits, test
    above) and the gradients, float32 as the parameters, agree to the dtype's rounding."""
    _compiled_against_eager(kind, stage, torch.float32, dtype, autocast=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
def test_autocast_keeps_the_master_weights_gradient_in_float32(kind, training, dtype):
    """Under torch.autocast the float32 weight is a master weight: the kernels read it rounded to
    the autocast dtype (ops._master_cast; SixteenBitTrain inside its node) and its gradient is
    float32 from the GEMM itself, not a 16-bit dW cast back (eager autocast's). On both routes (the
    module's eager call, the operator), with and without dX: W's gradient is float32, some of its
    elements are not values of the 16-bit dtype, and x's and the other gradients are as eager
    autocast's dtypes have them; test_autocast_computes_what_eager_autocast_computes bounds the
    values."""
    ref, x, dy, _ = _case(kind, training, shape=(200, 64, 96))
    calls = ((True, False, True), (False, False, True))
    _, records = _module_and_operator(ref, "fused", torch.float32, training, x.cuda(), dy.cuda(), calls,
                                      autocast=dtype)
    for call in range(len(calls)):
        xg, wg = records[10 * call + 4], records[10 * call + 5]  # (Y, 3 buffers, then x, W, b, scale, γ, β)
        assert wg.dtype == torch.float32 and not torch.equal(wg, wg.to(dtype).float()), call
        assert xg.dtype == torch.float32 if call == 0 else torch.equal(xg, torch.full((1,), -1.0)), call


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_the_last_pass_writes_a_sixteen_bit_y(stage, kind, training, dtype, monkeypatch):
    """A bf16/fp16 module's Y comes from the stage's last writer in the dtype (a pass; in eval mode
    33's GEMM epilogue under sums and fused): bit for bit the same
    kernels' float32 Y rounded to it (the operator with a float32 scale returns float32 Y, every
    other vector in the dtype), every output poisoned first (an unwritten element reads NaN), and
    the running buffers alike; M = 96 (16-byte rows: the vectorised and register row passes) and
    M = 100 (the row passes element by element), and one row (the eval routes' 1-row batch)."""
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    from fusedlib.build import load_stage
    load_stage(stage)  # registers the operator's CUDA kernel (the op is called before any module's forward)
    op = ops.OPS[stage]
    for n, m in ((200, 96), (77, 100)) + (((1, 96),) if not training else ()):
        ref, x, _, _ = _case(kind, training, shape=(n, 64, m))
        module = fusedlib.from_reference(ref, stage=stage).to(dtype).cuda().train(training)
        bn = module.bn
        outs = []
        for scale in (module.scale.detach(), module.scale.detach().float()):
            buffers = [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]
            with torch.no_grad():
                y = op(x.to("cuda", dtype), module.gemm.weight, module.gemm.bias, scale, bn.weight, bn.bias, *buffers,
                       module._kind, module.precision, training, bn.eps, bn.momentum)
            outs.append((y, *buffers))
        (y16, *b16), (y32, *b32) = outs
        assert y16.dtype == dtype and y32.dtype == torch.float32 and not y32.isnan().any(), (n, m)
        assert torch.equal(y16, y32.to(dtype)), (n, m)
        for a, b in zip(b16, b32):
            assert torch.equal(a, b), (n, m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", ["naive", "fused"])
def test_strided_sixteen_bit_vectors_give_the_contiguous_bits(stage, kind, training, dtype, monkeypatch):
    """The C++ forward widens a bf16/fp16 module's vectors into its scratch, and the kernel that
    updates the running buffers writes them in their dtype, whatever their stride: with every vector (bias, scale, γ, β, running_mean,
    running_var) a view of every other element of a larger tensor, the operator gives Y and the
    running buffers of contiguous copies bit for bit (every output and the scratch poisoned first),
    and leaves the elements between the views' as they were."""
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    ref, x, _, _ = _case(kind, training, shape=(77, 64, 100))
    module = fusedlib.from_reference(ref, stage=stage).to(dtype).cuda().train(training)
    weight, *vectors, count = (t.detach() for t in module._tensors())
    bn = module.bn

    def strided(v):
        base = torch.full((2 * v.numel(),), 7.0, dtype=v.dtype, device=v.device)
        base[::2] = v
        return base, base[::2]

    outs = []
    for layout in (lambda v: (None, v.clone()), strided):
        pairs = [layout(v) for v in vectors]
        views = [view for _, view in pairs]
        assert layout is not strided or not any(v.is_contiguous() for v in views if v.numel() > 1)
        with torch.no_grad():
            y = ops.OPS[stage](x.to("cuda", dtype), weight, *views, count.clone(), module._kind, module.precision,
                               training, bn.eps, bn.momentum)
        outs.append((y, views[4].clone(), views[5].clone()))
        for base, _ in pairs:
            assert base is None or bool((base[1::2] == 7).all())
    (y, *buffers), (y_strided, *buffers_strided) = outs
    assert y.dtype == dtype and not y.isnan().any() and torch.equal(y, y_strided)
    for a, b in zip(buffers, buffers_strided):
        assert torch.equal(a, b)
    if training:
        assert not torch.equal(buffers[0], vectors[4])  # (the running mean was written)


def _assert_same_bits(got, want, names=("dz", "dzt", "dgamma", "dbeta", "dscale_cols")):
    """Outputs (backward_passes' by default) of the same dtype and shape, each written (poisoned
    first: an unwritten element reads NaN) and bit for bit equal."""
    for name, a, b in zip(names, got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert not a.isnan().any() and torch.equal(a, b), name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("shape", [(200, 96), (77, 100), (2, 33)], ids=str)
def test_the_backward_passes_read_and_write_the_sixteen_bit_dtype(kind, dtype, shape, monkeypatch):
    """The backward's passes on a bf16/fp16 dY and Y (the 16-bit forward's output) read them as
    they are and write dZ' once, row-major, in their dtype (no transpose): bit for bit the same
    passes on float32 copies of dY and Y with dZ' rounded to the dtype afterwards, and dγ, dβ and
    the scale's column terms bit for bit, every output poisoned first (an unwritten element reads
    NaN); odd shapes and a dY that is a transposed view. A dY in the dtype beside a float32 Y (84)
    is read in float32, as before."""
    from fusedlib.build import load_backward
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    ext = load_backward(torch.cuda.current_device())
    n, m = shape
    g = torch.Generator(device="cuda").manual_seed(n + m)
    z = torch.randn(n, m, device="cuda", generator=g) * 3 + 1
    y = torch.softmax(torch.randn(n, m, device="cuda", generator=g), dim=1).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=g).to(dtype).t()  # a transposed view
    scale = torch.rand(1 if kind == "84" else m, device="cuda", generator=g) + 0.5
    gamma, beta = torch.randn(m, device="cuda", generator=g), torch.randn(m, device="cuda", generator=g)
    y_or_z = y if kind == "84" else z
    got = ext.backward_passes(dy, y_or_z, z, scale, gamma, beta, kind, 1e-5, False)
    want = ext.backward_passes(dy.float(), y_or_z.float(), z, scale, gamma, beta, kind, 1e-5, False)
    assert got[0].dtype == dtype and got[0].shape == (1, n, m) and got[1].numel() == 0
    assert not got[0].isnan().any()
    assert torch.equal(got[0], want[0].to(dtype))
    for a, b in zip(got[2:], want[2:]):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    if kind == "84":
        mixed = ext.backward_passes(dy, y.float(), z, scale, gamma, beta, kind, 1e-5, False)
        assert mixed[0].dtype == torch.float32 and mixed[1].shape == (1, m, n)
        assert torch.equal(mixed[0], want[0]) and torch.equal(mixed[1], want[1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("vectors", ["dtype", "float32"])
@pytest.mark.parametrize("need_dx", [True, False])
def test_the_sixteen_bit_backward_call_is_its_parts(kind, dtype, vectors, need_dx, monkeypatch):
    """``backward_sixteen``, the whole 16-bit backward in one C++ call, gives bit for bit what its
    parts give called one by one: the passes on float32 copies of the vectors, dZ' in the dtype,
    dX = dZ'·W, dW = dZ'ᵀ·X, the scale's column terms summed, and the vectors' gradients cast to
    their dtypes; the vectors in the dtype (a module ``.to(dtype)``: one cat and one cast each
    way) or in float32 (autocast's mix), a scale of one element (84) or one a column (33), dX
    asked for or not (an empty tensor), dY a transposed view, every output poisoned."""
    from fusedlib.algebra import scale_gradient
    from fusedlib.build import load_backward
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    ext = load_backward(torch.cuda.current_device())
    n, k, m = 77, 64, 100
    g = torch.Generator(device="cuda").manual_seed(n + m)
    x = torch.randn(n, k, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(m, k, device="cuda", generator=g) / 8).to(dtype)
    z = torch.randn(n, m, device="cuda", generator=g) * 3 + 1
    y = torch.softmax(torch.randn(n, m, device="cuda", generator=g), dim=1).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=g).to(dtype).t()
    vdtype = dtype if vectors == "dtype" else torch.float32
    scale = (torch.rand(1 if kind == "84" else m, device="cuda", generator=g) + 0.5).to(vdtype)
    gamma, beta = (torch.randn(m, device="cuda", generator=g).to(vdtype) for _ in range(2))
    y_or_z = y if kind == "84" else z
    got = ext.backward_sixteen(dy, y_or_z, z, x, weight, scale, gamma, beta, kind, 1e-5, need_dx)
    dz, _, dgamma, dbeta, ds_cols = ext.backward_passes(dy, y_or_z, z, scale.float(), gamma.float(), beta.float(),
                                                        kind, 1e-5, False)
    dz = dz[0]
    want = (dz @ weight if need_dx else x.new_empty(0), dz.t() @ x, torch.zeros_like(gamma),
            scale_gradient(ds_cols, scale).to(vdtype), dgamma.to(vdtype), dbeta.to(vdtype))
    assert len(got) == 6
    _assert_same_bits(got, want, ("dx", "dweight", "dbias", "dscale", "dgamma", "dbeta"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("shape", [(200, 96), (77, 101), (2, 33)], ids=str)
def test_the_backward_reads_a_sixteen_bit_z_widened(kind, dtype, shape, monkeypatch):
    """Z' in a 16-bit module's dtype, as the sums and fused forwards keep it (docs/design.md §15):
    the backward's passes read it widened, which is exact, so every output is bit for bit theirs on
    Z'.float(); with dY and Y in the dtype (the 16-bit passes: pairs of Z' where M is even, element
    by element where it is odd) and in float32 (the float32 passes, dZ'ᵀ too), every output
    poisoned first."""
    from fusedlib.build import load_backward
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    ext = load_backward(torch.cuda.current_device())
    n, m = shape
    g = torch.Generator(device="cuda").manual_seed(n * m)
    z = (torch.randn(n, m, device="cuda", generator=g) * 3 + 1).to(dtype)
    y = torch.softmax(torch.randn(n, m, device="cuda", generator=g), dim=1).to(dtype)
    dy = torch.randn(n, m, device="cuda", generator=g).to(dtype)
    scale = torch.rand(1 if kind == "84" else m, device="cuda", generator=g) + 0.5
    gamma, beta = torch.randn(m, device="cuda", generator=g), torch.randn(m, device="cuda", generator=g)
    for d, yy in ((dy, y), (dy.float(), y.float())):
        y_or = yy if kind == "84" else z  # (33 reads no Y)
        got = ext.backward_passes(d, y_or, z, scale, gamma, beta, kind, 1e-5, False)
        want = ext.backward_passes(d, yy if kind == "84" else z.float(), z.float(), scale, gamma, beta, kind, 1e-5,
                                   False)
        assert got[0].dtype == (dtype if d.dtype == dtype else torch.float32)
        _assert_same_bits(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("dy_dtype", ["dtype", "float32"])
def test_the_backward_passes_give_the_same_bits_off_column_pairs(kind, dtype, dy_dtype, monkeypatch):
    """At an even M a 16-bit dY, Y or Z is read a column pair at a time (the partials kernel's
    V = 2, the 16-bit dZ' kernel's pairs). The same tensors one element past that alignment (a
    storage offset of 1) are read a column at a time, the float32 route's way: every output bit for
    bit the aligned call's, with 300 rows (a last row tile of 44), every output poisoned first."""
    from fusedlib.build import load_backward
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    ext = load_backward(torch.cuda.current_device())
    n, m = 300, 130
    g = torch.Generator(device="cuda").manual_seed(7)
    ddtype = dtype if dy_dtype == "dtype" else torch.float32
    tensors = [(torch.randn(n, m, device="cuda", generator=g) * 3 + 1).to(dtype),  # Z
               torch.softmax(torch.randn(n, m, device="cuda", generator=g), dim=1).to(ddtype),  # Y
               torch.randn(n, m, device="cuda", generator=g).to(ddtype)]  # dY
    scale = torch.rand(1 if kind == "84" else m, device="cuda", generator=g) + 0.5
    gamma, beta = torch.randn(m, device="cuda", generator=g), torch.randn(m, device="cuda", generator=g)
    outs = []
    for offset in (0, 1):
        views = []
        for t in tensors:
            buf = torch.empty(t.numel() + offset, dtype=t.dtype, device="cuda")
            views.append(buf[offset:].view(n, m))
            views[-1].copy_(t)
            assert (views[-1].data_ptr() % (2 * t.element_size()) == 0) == (offset == 0)
        z, y, dy = views
        outs.append(ext.backward_passes(dy, y if kind == "84" else z, z, scale, gamma, beta, kind, 1e-5, False))
    _assert_same_bits(*outs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stage", ["sums", "fused"])
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("vectors", ["dtype", "float32"])
@pytest.mark.parametrize("shape", [(300, 64, 264), (130, 72, 100), (700, 128, 1032)], ids=str)
def test_sums_and_fused_keep_a_sixteen_bit_z_in_the_dtype(stage, kind, dtype, vectors, shape, monkeypatch):
    """sums and fused keep a 16-bit module's Z' in its dtype in train mode (docs/design.md §15; on
    wgmma through the TMA epilogue where M % 8 == 0, else from the registers; on mma.sync from the
    C tile), on each GEMM path the GPU has: the operator's z_out in the dtype holds X·Wᵀ rounded
    once (within one unit roundoff of the exact product, and the float32 sums' error); Y and
    the running buffers are bit for bit the same whether the backward keeps Z' (z_out) or not (Z' in
    Y's memory, or with float32 vectors, autocast's, whose scale promotes Y to float32, in memory of
    its own); nothing unwritten (Y and Z' poisoned first); a float32 z_out is refused, naming the
    dtype it expects."""
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    n, k, m = shape
    ref = make_reference(kind, k, m, seed=n)
    module = fusedlib.from_reference(ref, stage=stage, precision="tf32").cuda().train().to(dtype)
    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    x = torch.randn(n, k, device="cuda", generator=g).to(dtype)
    t = list(module._tensors())
    if vectors == "float32":  # (autocast's: the vectors stay float32, the operands 16-bit)
        t[1:7] = [v.float() for v in t[1:7]]
    from fusedlib.build import load_stage
    load_stage(stage, x.get_device())  # registers the operator's CUDA kernel
    op = getattr(torch.ops.fusedlib, stage)
    exact = (x.double() @ t[0].double().T).float()  # (no global TF32 switch in the way)
    paths = ["mma"] + (["wgmma"] if torch.cuda.get_device_capability() >= (9, 0) else [])
    for path in paths:
        outs = []
        for keep in (True, False):
            buffers = [b.clone() for b in t[5:8]]
            z = torch.full((n, m), float("nan"), device="cuda", dtype=dtype) if keep else None
            with torch.no_grad():
                y = op(x, *t[:5], *buffers, kind, "tf32", True, module.bn.eps, module.bn.momentum, path, z_out=z)
            outs.append((y, *buffers))
            if keep:
                assert not z.isnan().any(), path
                bound = exact.abs() * UNIT[dtype] * 1.01 + 1e-4 * exact.abs().max()  # (+ the fp32 sums' error)
                assert ((z.float() - exact).abs() <= bound).all(), path
        assert outs[0][0].dtype == (dtype if vectors == "dtype" else torch.float32)
        assert not outs[0][0].isnan().any(), path
        for a, b in zip(outs[0], outs[1]):
            assert torch.equal(a, b), path
    name = {torch.bfloat16: "BFloat16", torch.float16: "Half"}[dtype]
    with torch.no_grad(), pytest.raises(RuntimeError, match=f"z_out: expected a contiguous {name} "):
        op(x, *t, kind, "tf32", True, module.bn.eps, module.bn.momentum, None, z_out=torch.empty(n, m, device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stage", ["sums", "fused"])
@pytest.mark.parametrize("shape", [(300, 64, 264), (130, 72, 100), (700, 128, 1032), (1, 64, 96)], ids=str)
def test_the_eval_epilogue_writes_a_sixteen_bit_y_on_each_path(stage, dtype, shape, monkeypatch):
    """In eval mode sums and fused write 33's Y from the GEMM's AffineStore epilogue, in a 16-bit
    module's dtype (docs/design.md §15; on wgmma through the TMA epilogue where M % 8 == 0, else from
    the registers; on mma.sync from the C tile): on each GEMM path the GPU has, bit for bit the same
    kernels' float32 Y rounded to the dtype (the operator with a float32 scale returns float32 Y,
    every other vector in the dtype), Y poisoned first (an unwritten element reads NaN), the
    running buffers untouched."""
    monkeypatch.setenv("FUSEDLIB_POISON", "1")
    n, k, m = shape
    ref = make_reference("33", k, m, seed=n)
    module = fusedlib.from_reference(ref, stage=stage, precision="tf32").cuda().eval().to(dtype)
    with torch.no_grad():  # running statistics that are not the initial ones
        module.bn.running_mean.copy_(torch.randn(m, device="cuda"))
        module.bn.running_var.copy_(torch.rand(m, device="cuda") + 0.5)
    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    x = torch.randn(n, k, device="cuda", generator=g).to(dtype)
    t = list(module._tensors())
    from fusedlib.build import load_stage
    load_stage(stage, x.get_device())  # registers the operator's CUDA kernel
    op = getattr(torch.ops.fusedlib, stage)
    paths = ["mma"] + (["wgmma"] if torch.cuda.get_device_capability() >= (9, 0) else [])
    for path in paths:
        outs = []
        for scale in (t[2], t[2].float()):
            buffers = [b.clone() for b in t[5:8]]
            with torch.no_grad():
                y = op(x, *t[:2], scale, *t[3:5], *buffers, "33", "tf32", False, module.bn.eps, module.bn.momentum,
                       path)
            for a, b in zip(buffers, t[5:8]):
                assert torch.equal(a, b), path
            outs.append(y)
        y16, y32 = outs
        assert y16.dtype == dtype and y32.dtype == torch.float32, path
        assert not y32.isnan().any() and not y16.isnan().any(), path
        assert torch.equal(y16, y32.to(dtype)), path


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


def _compiled_against_eager(kind, stage, module_dtype, dtype, autocast, device="cuda"):
    """A module in ``module_dtype`` and its torch.compile (fullgraph) copy, three train steps and an
    eval step on the same inputs (under ``torch.autocast(device, dtype=dtype)`` with ``autocast``):
    each step's Y equal and in the module's dtype, the buffers equal, the gradients in the
    parameters' dtype and within the 16-bit ``dtype``'s rounding of each other."""
    torch._dynamo.reset()  # the other compiled modules of the class in this process: no recompile limit
    ref = make_reference(kind, 64, 48, seed=3)
    eager = fusedlib.from_reference(ref, stage=stage).to(device=device, dtype=module_dtype)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, fullgraph=True)
    gen = torch.Generator(device=device).manual_seed(1)
    for step in range(4):
        if step == 3:
            eager.eval(), model.eval()
        x = torch.rand(40, 64, device=device, generator=gen).to(module_dtype)
        with torch.autocast(device, dtype=dtype) if autocast else contextlib.nullcontext():
            y_eager, y_compiled = eager(x), compiled(x)
        assert y_compiled.dtype == y_eager.dtype == module_dtype and torch.equal(y_compiled, y_eager), step
        if step < 3:
            for y in (y_eager, y_compiled):
                y.float().square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        assert q.grad.dtype == module_dtype and torch.allclose(
            q.grad.float(), p.grad.float(), rtol=UNIT[dtype], atol=UNIT[dtype] * p.grad.abs().max().item()), name
    for name, buf in eager.named_buffers():
        assert torch.equal(buf, dict(model.named_buffers())[name]), name


def test_a_compiled_float32_module_under_cpu_autocast_matches_eager_autocast():
    """On the CPU: torch.compile (fullgraph, inductor) of a float32 module under torch.autocast in
    bf16, then in fp16 in the same process, each against the eager module under the same autocast
    (_compiled_against_eager): the CPU rule's rounding points survive compilation. (The CUDA
    cache's serving of the bf16 graph to fp16, which modules._run's cast of x prevents, did not
    occur on the CPU even without that cast: the GPU test above is that fix's check.)"""
    for dtype in DTYPES:
        _compiled_against_eager("84", "fused", torch.float32, dtype, autocast=True, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind,stage", [("84", "fused"), ("33", "sums")])
def test_a_compiled_sixteen_bit_module_matches_eager(kind, stage, dtype):
    """torch.compile (fullgraph) of a bf16/fp16 module over three train steps and an eval step:
    the compiled module takes the 16-bit kernels as eager does (the route reads no address), so
    outputs and buffers equal eager's and gradients agree to the dtype's rounding."""
    _compiled_against_eager(kind, stage, dtype, dtype, autocast=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, *DTYPES], ids=str)
@pytest.mark.parametrize("kind,scale_shape", [("84", (1, 1)), ("33", (1, 96))])
def test_a_two_dimensional_scale_runs_on_cuda_as_its_flat_copy(kind, scale_shape, dtype):
    """A one-element scale of shape (1, 1) (84) or a scale a column of shape (1, M) (33), which
    eager PyTorch broadcasts as it does (M,): on CUDA, in float32 and 16-bit, the module computes
    what the same module with the flat scale computes, bit for bit, and the scale's gradient comes
    in its own shape."""
    ref, x, dy, _ = _case(kind, True, shape=(200, 64, 96))
    flat = fusedlib.from_reference(copy.deepcopy(ref)).cuda().to(dtype)
    shaped = copy.deepcopy(flat)
    shaped.scale = torch.nn.Parameter(flat.scale.detach().reshape(scale_shape).clone())
    runs = []
    for module in (flat, shaped):
        xg = x.cuda().to(dtype).requires_grad_()
        y = module(xg)
        (y.float() * dy.cuda()).sum().backward()
        runs.append((y.detach(), xg.grad, module.bn.running_mean.clone(), module.scale.grad))
    assert runs[1][3].shape == scale_shape
    for a, b in zip(runs[0], runs[1]):
        assert torch.equal(a, b.reshape(a.shape))
