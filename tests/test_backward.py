"""The backward specification (algebra.train_backward and eval_backward, docs/design.md §10),
registered on the stage operators (fusedlib.ops) and used by the CPU path: gradcheck in
float64, gradients equal to PyTorch's autograd through the reference model for every
problem, stage, mode and precision, db = 0 in train mode (a zero gradient, not None), and a
few SGD steps that track the reference's parameters and running buffers."""
import copy

import pytest
import torch

import fusedlib
from fusedlib import algebra, ops
from fusedlib.reference import make_reference

PROBLEMS = ["84", "33", "39"]


def _model(problem, n_in=24, n_out=20, seed=0, dtype=torch.float64):
    ref = make_reference(problem, n_in, n_out, seed=seed).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # away from the defaults: γ ≠ 1, β ≠ 0, s ≠ 1 (33: a zero and a negative s)
        ref.bn.weight.copy_(1 + 0.3 * torch.randn(n_out, generator=gen, dtype=dtype))
        ref.bn.bias.copy_(0.3 * torch.randn(n_out, generator=gen, dtype=dtype))
        if problem == "84":
            ref.scale.fill_(1.7)
        else:
            ref.scale[0], ref.scale[1] = 0.0, -0.8
    return ref


def _dl_dy(y):
    """A generic ∂L/∂Y: a ramp from −1 to 1 over the elements."""
    return torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)


def _grads(module, x):
    x = x.clone().requires_grad_()
    y = module(x)
    (y * _dl_dy(y)).sum().backward()
    named = dict(module.named_parameters())
    return {"x": x.grad, **{k: named[k].grad for k in ("gemm.weight", "gemm.bias", "scale", "bn.weight", "bn.bias")}}


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_gradients_match_autograd_of_the_reference(problem, stage, mode):
    ref = _model(problem)
    with torch.no_grad():  # running buffers away from (0, 1)
        ref(torch.rand(40, 24, dtype=torch.float64) * 3 - 1)
    fused = fusedlib.from_reference(ref, stage=stage)
    ref.train(mode == "train"), fused.train(mode == "train")
    x = torch.rand(17, 24, dtype=torch.float64)
    want, got = _grads(ref, x), _grads(fused, x)
    for name in want:
        assert got[name] is not None, f"{name}: no gradient"
        err = ((got[name] - want[name]).norm() / want[name].norm().clamp_min(1e-300)).item()
        if name == "gemm.bias" and mode == "train":  # zero exactly here, rounding noise in the reference
            assert torch.equal(got[name], torch.zeros_like(got[name]))
            assert want[name].abs().max() < 1e-12 * want["gemm.weight"].abs().max()
        else:
            assert err < 1e-10, (name, err)


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_tensor_core_precisions_differentiate_their_own_forward(problem, precision):
    """The backward uses Z as the precision's GEMM made it; against the reference (exact
    products) the gradients stay within the forward's budget."""
    ref = _model(problem)
    fused = fusedlib.from_reference(ref, stage="fused", precision=precision)
    x = torch.rand(17, 24, dtype=torch.float64)
    want, got = _grads(ref, x), _grads(fused, x)
    budget = {"tf32": 5e-3, "3xtf32": 1e-5}[precision]
    for name in ("x", "gemm.weight", "scale", "bn.weight", "bn.bias"):
        scale = want[name].norm()
        if name == "scale" and problem == "84":
            # ds = Σ_ij dV∘U adds terms of both signs, whose total can be 1e4 times smaller
            # than they are: measure the error against the terms, not their sum.
            with torch.no_grad():
                u = ref.bn.train()(ref.gemm(x))
                y = torch.softmax(ref.scale * u, dim=1)
                dy = _dl_dy(y)
                scale = (y * (dy - (dy * y).sum(1, keepdim=True)) * u).abs().sum()
        err = ((got[name] - want[name]).norm() / scale).item()
        assert err < budget, (name, err)


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage", ["naive", "fused"])
@pytest.mark.parametrize("training", [True, False])
def test_gradcheck_float64(problem, stage, training):
    ref = _model(problem, n_in=6, n_out=5)
    x = torch.rand(7, 6, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in
              (ref.gemm.weight, ref.gemm.bias, ref.scale, ref.bn.weight, ref.bn.bias)]
    buffers = (torch.rand(5, dtype=torch.float64), 0.5 + torch.rand(5, dtype=torch.float64),
               torch.tensor(0))

    def fn(x, w, b, s, g, be):  # the operator updates the buffers in place (train): fresh copies each call
        state = [t.clone() for t in buffers]
        y = ops.OPS[stage](x, w, b, s, g, be, *state, problem, "fp32", training, 1e-5, 0.1)
        assert not any(t.requires_grad for t in state)
        return y

    assert torch.autograd.gradcheck(fn, (x, *params), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage", ["naive", "fused"])
@pytest.mark.parametrize("training", [True, False])
def test_gradgradcheck_float64(problem, stage, training):
    """The backward is itself differentiable (create_graph=True: ops._differentiable_backward),
    second derivatives against finite differences of the first."""
    ref = _model(problem, n_in=5, n_out=4)
    x = torch.rand(6, 5, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in
              (ref.gemm.weight, ref.gemm.bias, ref.scale, ref.bn.weight, ref.bn.bias)]
    buffers = (torch.rand(4, dtype=torch.float64), 0.5 + torch.rand(4, dtype=torch.float64), torch.tensor(0))

    def fn(x, w, b, s, g, be):
        return ops.OPS[stage](x, w, b, s, g, be, *(t.clone() for t in buffers), problem, "fp32", training, 1e-5, 0.1)

    assert torch.autograd.gradgradcheck(fn, (x, *params), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_gradient_penalty_matches_the_reference(problem, mode):
    """A loss with a gradient penalty, L = Σ Y∘R + ‖∂(Σ Y∘R)/∂x‖² (create_graph=True, as WGAN-GP
    trains): every parameter's gradient and x's equal autograd's through the reference model
    (float64), the penalty's second-order terms included; none is dropped."""
    ref = _model(problem)
    with torch.no_grad():
        ref(torch.rand(40, 24, dtype=torch.float64) * 3 - 1)
    fused = fusedlib.from_reference(ref, stage="fused")
    ref.train(mode == "train"), fused.train(mode == "train")
    x = torch.rand(17, 24, dtype=torch.float64)
    r = torch.linspace(-1, 1, 17 * 20, dtype=torch.float64).reshape(17, 20).cos()

    def grads(module):
        xi = x.clone().requires_grad_()
        y = module(xi)
        (g,) = torch.autograd.grad((y * r).sum(), xi, create_graph=True)
        assert g.requires_grad, "the first-order gradient carries no graph: the penalty would be dropped"
        ((y * r).sum() + g.pow(2).sum()).backward()
        return {"x": xi.grad, **{k: p.grad for k, p in module.named_parameters()}}

    want, got = grads(ref), grads(fused)
    for name in want:
        assert got[name] is not None, f"{name}: no gradient"
        if name == "gemm.bias" and mode == "train":  # zero exactly here, rounding noise in the reference
            assert torch.equal(got[name], torch.zeros_like(got[name]))
            continue
        err = ((got[name] - want[name]).norm() / want[name].norm()).item()
        assert err < 1e-10, (name, err)
    # the penalty's terms are not negligible: without them W's gradient would differ
    fused.zero_grad()
    (fused(x) * r).sum().backward()
    w = want["gemm.weight"]
    assert ((fused.gemm.weight.grad - w).norm() / w.norm()).item() > 1e-3


def test_bias_gradient_vanishes_in_train_mode():
    """Σ_i dT = 0 because mean_i(x̂) = 0: the identity behind db = 0, checked numerically."""
    ref = _model("33")
    x = torch.rand(9, 24, dtype=torch.float64)
    z = x @ ref.gemm.weight.t()
    zc = z - z.mean(0)
    var = (zc * zc).mean(0)
    dy = torch.randn(9, 20, dtype=torch.float64)
    s = ref.scale.detach()
    sig = torch.sqrt(s * s * var + ref.bn.eps)
    xhat = s * zc / sig
    dt = (ref.bn.weight.detach() / sig) * (dy - dy.mean(0) - xhat * (dy * xhat).mean(0))
    assert dt.sum(0).abs().max() < 1e-12 * dt.abs().max()


@pytest.mark.parametrize("problem", ["84", "33"])
def test_sgd_steps_track_the_reference(problem):
    """Five SGD steps (momentum, weight decay) on a fixed batch stream, float32: parameters
    and running buffers stay with the reference's."""
    ref = _model(problem, dtype=torch.float32)
    sgd_steps_agree(ref, fusedlib.from_reference(ref, stage="fused"), batch=32)


def sgd_steps_agree(ref, fused, batch: int, steps: int = 5):
    """``steps`` SGD steps (momentum, weight decay) of ``ref`` and ``fused`` on one stream of
    batches (on ``ref``'s device): parameters and running buffers stay together."""
    device = ref.gemm.weight.device
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-2) for m in (ref, fused)]
    gen = torch.Generator(device=device).manual_seed(5)
    for _ in range(steps):
        x = torch.rand(batch, ref.gemm.in_features, device=device, generator=gen)
        target = torch.rand(batch, ref.gemm.out_features, device=device, generator=gen)
        for model, opt in zip((ref, fused), opts):
            opt.zero_grad()
            ((model(x) - target) ** 2).mean().backward()
            opt.step()
    for (name, p), q in zip(ref.named_parameters(), fused.parameters()):
        assert torch.allclose(p, q, atol=2e-5, rtol=1e-4), name
    for (name, a), b in zip(ref.named_buffers(), fused.buffers()):
        assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4), name


def test_the_cpu_forward_is_the_stage_operator():
    fused = fusedlib.from_reference(_model("84", dtype=torch.float32), stage="sums")
    with torch.no_grad():
        assert fused(torch.rand(8, 24)).grad_fn is None
    y = fused(torch.rand(8, 24))
    assert isinstance(y.grad_fn, torch.autograd.function.BackwardCFunction), y.grad_fn
    assert y.grad_fn._forward_cls is ops.StageFunction


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("tile_rows", [1, 7, 32, 128])
def test_fused_backward_algebra_equals_the_specification(problem, tile_rows):
    """train_backward_fused (one pass for the column partials, per-column coefficients, one
    elementwise dZ') gives train_backward's gradients in float64, for row tiles that do and
    do not divide N, with a zero and a negative scale (33/39), γ ≠ 1 and β ≠ 0."""
    ref = _model(problem, n_in=24, n_out=20, seed=3)
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(45, 24, generator=gen, dtype=torch.float64)
    z = algebra.matmul_nt(x, ref.gemm.weight.detach())
    mean, var = algebra.column_stats_two_pass(z)
    bn = ref.bn
    kind = "84" if problem == "84" else "33"
    y = ref(x).detach()
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    args = (kind, dy, y, z - mean, var, x, ref.gemm.weight.detach(), ref.scale.detach(), bn.weight.detach(),
            bn.bias.detach(), bn.eps)
    want = algebra.train_backward(*args)
    got = algebra.train_backward_fused(*args, tile_rows=tile_rows)
    for name, a, b in zip(("dx", "dweight", "dbias", "dscale", "dgamma", "dbeta"), got, want):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (name, (a - b).abs().max().item())


def test_fused_backward_partials_are_the_column_sums_tile_by_tile():
    """backward_tile_partials: one row per tile, tiles in order; their sum is the column sum."""
    gen = torch.Generator().manual_seed(0)
    dy, y, zc = (torch.randn(10, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    r, s1, s2 = algebra.backward_tile_partials("84", dy, y, zc, 4)
    assert s1.shape == (3, 6) and s2.shape == (3, 6) and r.shape == (10,)
    g = y * (dy - (dy * y).sum(dim=1, keepdim=True))
    assert torch.allclose(s1[2], g[8:].sum(dim=0)) and torch.allclose(s2.sum(dim=0), (g * zc).sum(dim=0))
    r33, t1, _ = algebra.backward_tile_partials("33", dy, None, zc, 4)
    assert r33 is None and torch.allclose(t1.sum(dim=0), dy.sum(dim=0))
