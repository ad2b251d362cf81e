"""The stage operators (torch.ops.fusedlib.<stage>, fusedlib.ops): torch.library.opcheck
(schema, fake tensor, AOT dispatch, autograd registration), torch.compile with
fullgraph=True and torch.export through a fused module, on the CPU."""
import copy

import pytest
import torch

import fusedlib
from fusedlib import algebra, ops
from fusedlib.reference import make_reference


def _args(kind, training, requires_grad, momentum=0.1, dtype=torch.float32, n=9, k=12, m=7):
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(n, k, generator=gen, dtype=dtype)
    weight, bias = torch.randn(m, k, generator=gen, dtype=dtype), torch.randn(m, generator=gen, dtype=dtype)
    scale = torch.tensor([1.3], dtype=dtype) if kind == "84" else torch.randn(m, generator=gen, dtype=dtype)
    gamma, beta = 1 + 0.2 * torch.randn(m, generator=gen, dtype=dtype), 0.2 * torch.randn(m, generator=gen, dtype=dtype)
    tensors = [x, weight, bias, scale, gamma, beta]
    if requires_grad:
        tensors = [t.requires_grad_() for t in tensors]
    buffers = [0.1 * torch.randn(m, generator=gen, dtype=dtype), 0.5 + torch.rand(m, generator=gen, dtype=dtype),
               torch.tensor(4)]
    return (*tensors, *buffers, kind, "fp32", training, 1e-5, momentum)


@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("training,requires_grad,momentum",
                         [(True, True, 0.1), (True, False, None), (False, True, 0.1)])
def test_opcheck(stage, kind, training, requires_grad, momentum):
    torch.library.opcheck(ops.OPS[stage], _args(kind, training, requires_grad, momentum))


@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_opcheck_sixteen_bit_operands(stage, dtype, training):
    """x and W in bf16/fp16 with float32 vectors, as the CUDA modules and the autocast rule hand
    them to the operator (docs/design.md §15): Y in x's dtype promoted with the scale's (float32
    here), the fake's dtype included, and the autograd and AOT registrations."""
    args = list(_args("84", training, True, 0.1))
    args[0], args[1] = (args[i].detach().to(dtype).requires_grad_() for i in (0, 1))
    y = ops.OPS[stage](*args)
    assert y.dtype == torch.float32
    torch.library.opcheck(ops.OPS[stage], tuple(args))


def test_operators_are_registered_under_torch_ops():
    for stage in algebra.STAGES:
        assert getattr(torch.ops.fusedlib, stage).default is not None
    with pytest.raises(ValueError, match="stage"):
        ops.stage_op("fastest")


@pytest.mark.parametrize("problem,stage,momentum", [("84", "fused", 0.1), ("33", "sums", None)])
def test_torch_compile_fullgraph_matches_eager(problem, stage, momentum):
    """torch.compile(fullgraph=True) of a model holding a fused module: outputs, gradients and
    buffer updates equal eager's over three train steps and an eval step (momentum None: the
    cumulative average, no host sync in the graph)."""
    ref = make_reference(problem, 12, 7, seed=0)
    ref.bn.momentum = momentum
    eager = fusedlib.from_reference(ref, stage=stage)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        if step == 3:
            eager.eval(), model.eval()
        x = torch.rand(9, 12, generator=gen)
        y_eager, y_compiled = eager(x), compiled(x)
        assert torch.allclose(y_compiled, y_eager, atol=1e-6, rtol=1e-5)
        if step < 3:
            y_eager.square().sum().backward()
            y_compiled.square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6, rtol=1e-5), name
    for name, buf in eager.named_buffers():
        assert torch.allclose(buf, dict(model.named_buffers())[name]), name


def test_torch_compile_inductor():
    """The default backend (Inductor, C++ codegen on the CPU) too, one train and one eval call."""
    model = fusedlib.from_reference(make_reference("84", 12, 7, seed=0), stage="fused")
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True)
    x = torch.rand(9, 12)
    assert torch.allclose(compiled(x), twin(x), atol=1e-6)
    model.eval(), twin.eval()
    assert torch.allclose(compiled(x), twin(x), atol=1e-6)
    assert torch.equal(model.bn.running_mean, twin.bn.running_mean)


@pytest.mark.parametrize("kind", ["84", "33"])
def test_torch_export_matches_the_module(kind):
    """torch.export.export of a fused module (the operator's route, as torch.compile's): in eval
    mode the exported program gives the module's Y bit for bit, at the traced batch and, with the
    batch dimension dynamic, at another; in train mode its call updates the running buffers (the
    operator mutates them in place) to the module's values."""
    module = fusedlib.from_reference(make_reference(kind, 12, 7, seed=0), stage="fused")
    x, x17 = torch.rand(9, 12), torch.rand(17, 12)
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(copy.deepcopy(module).eval(), (x,), dynamic_shapes={"x": {0: batch}}).module()
    module.eval()
    assert torch.equal(program(x), module(x)) and torch.equal(program(x17), module(x17))
    module.train()
    program = torch.export.export(copy.deepcopy(module), (x,)).module()
    assert torch.equal(program(x), module(x))
    exported = dict(program.named_buffers())
    for name, buf in module.named_buffers():
        assert torch.equal(exported[name], buf), name
    assert int(module.bn.num_batches_tracked) == 1


def backward_args(kind, device="cpu", precision="fp32", n=9, k=12, m=7):
    """Arguments of torch.ops.fusedlib.train_backward as a train-mode forward leaves them: dY,
    Y (84; None for 33), Z, x, weight, scale, γ, β, kind, precision, ε."""
    x, weight, _, scale, gamma, beta, *_ = _args(kind, True, False, n=n, k=k, m=m)
    x, weight, scale, gamma, beta = (t.to(device) for t in (x, weight, scale, gamma, beta))
    z = algebra.matmul_nt(x, weight, precision)
    gen = torch.Generator().manual_seed(4)
    y = torch.softmax(torch.randn(z.shape, generator=gen), dim=1).to(device) if kind == "84" else None
    dy = torch.randn(z.shape, generator=gen).to(device)
    return (dy, y, z, x, weight, scale, gamma, beta, kind, precision, 1e-5)


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("need_dx", [True, False])
def test_opcheck_train_backward(kind, need_dx):
    """The backward's operator (no autograd of its own: the stage operators' backward calls
    it): schema, fake tensor and AOT dispatch; without need_dx, dx is an empty tensor."""
    args = (*backward_args(kind), need_dx)
    torch.library.opcheck(ops.train_backward, args)
    assert ops.train_backward(*args)[0].shape == ((9, 12) if need_dx else (0,))


def test_input_without_grad_gets_none_and_the_rest_unchanged():
    """x not requiring grad (a network's input data): no dX, the parameters' gradients equal."""
    module = fusedlib.from_reference(make_reference("84", 12, 7, seed=0), stage="fused")
    x = torch.rand(9, 12)
    module(x).square().sum().backward()
    want = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    xg = x.clone().requires_grad_()
    module(xg).square().sum().backward()
    assert xg.grad is not None and all(torch.equal(p.grad, w) for p, w in zip(module.parameters(), want))


def test_train_backward_is_the_specification():
    """On the CPU the operator is algebra.train_backward's result, the bias's gradient zeros."""
    args = backward_args("84")
    dy, y, z, x, weight, scale, gamma, beta, kind, _, eps = args
    mean, var = algebra.column_stats_two_pass(z)
    want = algebra.train_backward(kind, dy, y, z - mean, var, x, weight, scale, gamma, beta, eps)
    got = ops.train_backward(*args)
    assert torch.equal(got[2], torch.zeros(7))
    for name, a, b in zip(("dx", "dweight", "dbias", "dscale", "dgamma", "dbeta"), got, want):
        if name != "dbias":
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


def test_three_tf32_sums_the_parts_slice_by_slice():
    """3xTF32 over slices of the inner dimension (one that does not divide it): fp32-class
    against float64, and the slices add up to one product."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 37, generator=gen), torch.randn(37, 4, generator=gen)
    got = ops.three_tf32(*algebra.tf32_split(a), *algebra.tf32_split(b), slice_len=8)
    want = a.double() @ b.double()
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-6
    whole = ops.three_tf32(*algebra.tf32_split(a), *algebra.tf32_split(b), slice_len=64)
    assert torch.allclose(got, whole, rtol=1e-6, atol=1e-6)


def test_cuda_backward_kernel_takes_the_schema_arguments():
    """The CUDA kernel registered for train_backward (fusedlib.cuda) must take every argument of
    the schema, in order: the dispatcher passes them all (a CPU machine cannot run it to see)."""
    import inspect

    from fusedlib import cuda
    schema = [a.name for a in torch.ops.fusedlib.train_backward.default._schema.arguments]
    assert list(inspect.signature(cuda._train_backward_cuda).parameters) == schema


def test_eager_call_only_for_plain_tensors_outside_any_mode():
    """ops.eager_call, the gate of the backward's direct route (ops.train_backward_call): plain
    tensors of the device type pass (None is skipped); another device, a tensor subclass, a
    FakeTensor, a dispatch or torch-function mode, or functorch's vmap send the call through
    the operator, which they need to see."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    a, b = torch.randn(3, 4), torch.randn(4)
    assert ops.eager_call((a, None, b, torch.nn.Parameter(b)), device_type="cpu")
    assert not ops.eager_call((a, b))  # the default device type is CUDA

    class Sub(torch.Tensor):
        pass
    assert not ops.eager_call((a, a.as_subclass(Sub)), device_type="cpu")

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Passthrough():
        assert not ops.eager_call((a,), device_type="cpu")
    with TorchFunctionMode():
        assert not ops.eager_call((a,), device_type="cpu")
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(a)
    assert not ops.eager_call((fake,), device_type="cpu")
    seen = []
    torch.vmap(lambda row: seen.append(ops.eager_call((row,), device_type="cpu")) or row)(a)
    assert seen == [False]


def test_train_backward_call_routes_every_argument(monkeypatch):
    """ops.train_backward_call: with the direct route open it hands the CUDA kernel's function
    every argument in the schema's order; without it, the operator's result."""
    args = (*backward_args("84"), False, None, None)
    assert all(torch.equal(g, w) for g, w in zip(ops.train_backward_call(*args), ops.train_backward(*args)))
    seen = []
    monkeypatch.setattr(ops, "_CUDA_TRAIN_BACKWARD", lambda *a: seen.append(a) or "kernel")
    monkeypatch.setattr(ops, "eager_call", lambda tensors: True)
    assert ops.train_backward_call(*args) == "kernel" and seen == [args]


def test_cuda_sync_kernel_takes_the_schema_arguments():
    """sync_train's CUDA kernel (fusedlib.cuda), which the dispatcher calls and SyncStageFunction
    calls directly, both with every argument of the schema in order."""
    import inspect

    from fusedlib import cuda
    schema = [a.name for a in torch.ops.fusedlib.sync_train.default._schema.arguments]
    assert list(inspect.signature(cuda._sync_train_cuda).parameters) == schema
    assert ops._CUDA_SYNC_TRAIN is cuda._sync_train_cuda and ops._CUDA_TRAIN_BACKWARD is cuda._train_backward_cuda


@pytest.mark.parametrize("training", [True, False])
def test_stage_function_calls_the_kernel_below_autograd(training, monkeypatch):
    """StageFunction's forward sends the operator straight to the device's kernel where
    ops.eager_call allows (the Autograd pass, a Python kernel, runs once a forward instead of
    twice), with the same output, buffers and gradients as through the dispatcher."""
    calls = []
    real = ops.needs_grad
    monkeypatch.setattr(ops, "needs_grad", lambda args: calls.append(1) or real(args))
    results = []
    for direct in (True, False):
        if not direct:
            monkeypatch.setattr(ops, "eager_call", lambda tensors, device_type="cuda": False)
        calls.clear()
        module = fusedlib.from_reference(make_reference("33", 12, 7, seed=0), stage="fused").train(training)
        x = torch.rand(9, 12, requires_grad=True)
        y = module(x)
        assert len(calls) == (1 if direct else 2)
        y.square().sum().backward()
        results.append([y.detach(), x.grad, module.bn.running_mean.clone(), *(p.grad for p in module.parameters())])
    assert all(torch.equal(a, b) for a, b in zip(*results))
