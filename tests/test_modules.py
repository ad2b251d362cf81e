"""Drop-in modules: same state_dict as the reference, train/eval behaviour, clear errors."""
import copy

import pytest
import torch

import fusedlib
from fusedlib import FusedGemmBatchNormScalingSoftmax, FusedGemmScaleBatchNorm
from fusedlib.reference import GemmBatchNormScalingSoftmax, GemmScaleBatchNorm


def test_state_dict_keys_and_parameters_match_reference():
    torch.manual_seed(1)
    ref = GemmScaleBatchNorm(10, 6, (6,))
    torch.manual_seed(1)
    fused = FusedGemmScaleBatchNorm(10, 6, (6,), stage="fold")
    assert list(ref.state_dict()) == list(fused.state_dict())
    for key, value in ref.state_dict().items():
        assert torch.equal(value, fused.state_dict()[key]), key
    ref84 = GemmBatchNormScalingSoftmax(10, 6)
    fused84 = FusedGemmBatchNormScalingSoftmax(10, 6)
    assert list(ref84.state_dict()) == list(fused84.state_dict())


@pytest.mark.parametrize("ref_cls,fused_cls,args", [
    (GemmBatchNormScalingSoftmax, FusedGemmBatchNormScalingSoftmax, (10, 6)),
    (GemmScaleBatchNorm, FusedGemmScaleBatchNorm, (10, 6, (6,))),
])
def test_load_state_dict_round_trip(ref_cls, fused_cls, args):
    torch.manual_seed(0)
    ref = ref_cls(*args)
    ref(torch.rand(5, 10))                      # running buffers and num_batches_tracked move
    torch.manual_seed(1)
    fused = fused_cls(*args, stage="sums")      # other parameters to start with
    fused.load_state_dict(ref.state_dict())
    for key, value in ref.state_dict().items():
        assert torch.equal(fused.state_dict()[key], value), key
    fused(torch.rand(5, 10))                    # the fused module trains on ...
    back = ref_cls(*args)
    back.load_state_dict(fused.state_dict())    # ... and its state loads into the reference
    for key, value in fused.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    assert int(back.bn.num_batches_tracked) == 2


@pytest.mark.parametrize("stage", fusedlib.STAGES)
def test_train_then_eval_follows_the_reference(stage):
    torch.manual_seed(2)
    ref = GemmScaleBatchNorm(12, 7, (7,)).double()
    fused = fusedlib.from_reference(ref, stage=stage)
    assert fused.training
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.randn(9, 12, generator=g, dtype=torch.float64)
        assert torch.allclose(fused(x), ref(x), rtol=1e-10, atol=1e-12)
    fused.eval()
    ref.eval()
    buffers = fused.bn.running_mean.clone(), fused.bn.running_var.clone()
    x = torch.randn(4, 12, generator=g, dtype=torch.float64)
    assert torch.allclose(fused(x), ref(x), rtol=1e-10, atol=1e-12)
    assert torch.equal(fused.bn.running_mean, buffers[0]) and torch.equal(fused.bn.running_var, buffers[1])
    assert int(fused.bn.num_batches_tracked) == 3   # eval forwards leave the buffers alone


def test_from_reference_copies_state_and_mode():
    ref = GemmBatchNormScalingSoftmax(8, 5).double().eval()
    fused = fusedlib.from_reference(ref, stage="sums")
    assert not fused.training and fused.stage == "sums" and fused.precision == "fp32"
    assert fused.gemm.weight.dtype == torch.float64
    x = torch.rand(4, 8, dtype=torch.float64)
    assert torch.allclose(fused(x), ref(x), rtol=1e-12)
    with pytest.raises(TypeError, match="model:"):
        fusedlib.from_reference(torch.nn.Linear(3, 4))


def test_repr_and_options():
    fused = FusedGemmBatchNormScalingSoftmax(8, 5, stage="fused", precision="3xtf32")
    assert "3xtf32" in repr(fused)
    fused.stage = "naive"                      # every stage runs every precision
    assert fused.stage == "naive" and fused.precision == "3xtf32" and "'naive'" in repr(fused)
    fused.precision = "tf32"
    assert fused.precision == "tf32"
    with pytest.raises(ValueError, match="stage:"):
        fused.stage = "fastest"
    with pytest.raises(ValueError, match="precision:"):
        fused.precision = "bf16"
    assert fused.stage == "naive" and fused.precision == "tf32"   # unchanged by the refused values
    with pytest.raises(ValueError, match="stage:"):
        FusedGemmScaleBatchNorm(8, 5, (5,), stage="fastest")
    with pytest.raises(ValueError, match="precision:"):
        FusedGemmScaleBatchNorm(8, 5, (5,), precision="fp16")
    for stage in fusedlib.STAGES:
        for precision in ("fp32", "tf32", "3xtf32"):
            m = FusedGemmScaleBatchNorm(8, 5, (5,), stage=stage, precision=precision)
            assert (m.stage, m.precision) == (stage, precision)
            assert m(torch.rand(4, 8)).shape == (4, 5)


@pytest.fixture
def module():
    return FusedGemmScaleBatchNorm(8, 5, (5,), stage="fused")


@pytest.mark.parametrize("bad,error,match", [
    ([[1.0] * 8] * 4, TypeError, "x: expected a torch.Tensor"),
    (torch.rand(4, 8, dtype=torch.float64), TypeError, "x: expected dtype torch.float32"),
    (torch.rand(4, 8, dtype=torch.float16), TypeError, "x: expected dtype"),
    (torch.rand(4, 8, device="meta"), ValueError, "x: expected a tensor on cpu"),
    (torch.rand(4, 2, 4), ValueError, "x: expected a 2-D tensor"),
    (torch.rand(4, 7), ValueError, "x: expected in_features=8"),
    (torch.rand(1, 8), ValueError, "Expected more than 1 value per channel when training.*x:"),
])
def test_bad_input_is_a_clear_error(module, bad, error, match):
    with pytest.raises(error, match=match):
        module(bad)


def test_batch_of_one_is_fine_in_eval_mode(module):
    module.eval()
    assert torch.isfinite(module(torch.rand(1, 8))).all()


def test_non_contiguous_input_runs_as_its_copy(module):
    """A transposed or strided x is accepted (one row-major copy) and gives the output of
    its contiguous copy, buffers included."""
    twin = copy.deepcopy(module)
    base = torch.rand(8, 10)
    x = base.t()[:, :8]  # (10, 8) view with strides (1, 10)
    assert not x.is_contiguous()
    y, y_ref = module(x), twin(x.contiguous())
    assert torch.equal(y, y_ref)
    assert torch.equal(module.bn.running_var, twin.bn.running_var)


def test_parametrized_weight_is_used():
    """The forward reads its tensors from the module dictionaries; a parametrized weight (not
    in gemm._parameters) is looked up the usual way and is the one the forward uses."""
    from torch.nn.utils import parametrize

    class Double(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    ref = GemmScaleBatchNorm(8, 6, (6,))
    module = fusedlib.from_reference(ref, stage="sums")
    twin = copy.deepcopy(module)
    parametrize.register_parametrization(module.gemm, "weight", Double())
    with torch.no_grad():
        twin.gemm.weight.mul_(2)
    x = torch.rand(5, 8)
    assert torch.equal(module(x), twin(x))
    assert torch.equal(module.bn.running_mean, twin.bn.running_mean)


@pytest.mark.parametrize("kind", ["84", "33"])
def test_a_frozen_batchnorm_uses_its_running_statistics(kind):
    """Train or eval mode is BatchNorm's own, as in nn.Sequential(Linear, BatchNorm1d): a model in
    train mode with ``bn.eval()`` (frozen BatchNorm, fine-tuning) uses the running buffers and
    updates none of them, as the reference does; ``bn.train()`` inside an eval model the reverse."""
    from fusedlib.reference import make_reference
    ref = make_reference(kind, 8, 6, seed=0)
    fused = fusedlib.from_reference(copy.deepcopy(ref))
    x = torch.rand(5, 8)
    for freeze in (True, False):
        for m in (ref, fused):
            m.train(not freeze)
            m.bn.train(not freeze)
            m.train(freeze)  # the outer flag the other way: only bn's decides
            m.bn.train(not freeze)
        before = fused.bn.running_mean.clone()
        y, y_ref = fused(x), ref(x)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
        assert torch.equal(fused.bn.num_batches_tracked, ref.bn.num_batches_tracked)
        assert torch.equal(fused.bn.running_mean, before) == freeze  # untouched only when frozen
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(fused.bn, name), getattr(ref.bn, name), rtol=1e-6, atol=1e-7)


def test_submodules_the_forward_would_ignore_are_errors(module):
    """The fused module reads gemm's and bn's tensors and never calls them: a hook on either, a
    replaced gemm or a BatchNorm without running statistics is an error naming it, not an output
    that ignores it; parametrizations (read as tensors) are fine."""
    x = torch.rand(4, 8)
    handle = module.gemm.register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(TypeError, match="gemm: has forward or backward hooks"):
        module(x)
    handle.remove()
    handle = module.bn.register_forward_pre_hook(lambda m, i: None)
    with pytest.raises(TypeError, match="bn: has forward or backward hooks"):
        module(x)
    handle.remove()
    handle = module.gemm.register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(TypeError, match="gemm: has forward or backward hooks"):
        module(x)
    handle.remove()
    for name, replacement, match in (("gemm", torch.nn.Linear(8, 5, bias=False), "gemm: expected an nn.Linear with a bias"),
                                     ("bn", torch.nn.BatchNorm1d(5, affine=False), "bn: expected affine=True")):
        other = copy.deepcopy(module)
        setattr(other, name, replacement)
        with pytest.raises(TypeError, match=match):
            other(x)
    if hasattr(module, "softmax"):  # 84: a replaced softmax would be ignored, as gemm would
        other = copy.deepcopy(module)
        other.softmax = torch.nn.LogSoftmax(dim=1)
        with pytest.raises(TypeError, match="softmax: expected nn.Softmax"):
            other(x)

    class LoRALinear(torch.nn.Linear):
        pass

    other = copy.deepcopy(module)
    other.gemm = LoRALinear(8, 5)
    with pytest.raises(TypeError, match="gemm: expected an nn.Linear"):
        other(x)
    other = copy.deepcopy(module)
    other.bn.running_mean = None
    with pytest.raises(ValueError, match="bn: expected track_running_stats=True"):
        other(x)
    from torch.nn.utils import prune
    other = copy.deepcopy(module)
    prune.l1_unstructured(other.gemm, "weight", amount=0.5)
    with pytest.raises(TypeError, match="prune.remove"):
        other(x)
    prune.remove(other.gemm, "weight")
    assert torch.isfinite(other(x)).all()


def test_pytorch_sync_batchnorm_converter_keeps_the_batch_statistics(module):
    """nn.SyncBatchNorm.convert_sync_batchnorm (what DDP recipes call) swaps bn for an
    nn.SyncBatchNorm with the same tensors: the fused module still runs (one process: the local
    batch, as nn.SyncBatchNorm does without torch.distributed), with the same outputs and buffers."""
    twin = copy.deepcopy(module)
    converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
    assert type(converted.bn) is torch.nn.SyncBatchNorm
    x = torch.rand(6, 8)
    assert torch.equal(converted(x), twin(x))
    assert torch.equal(converted.bn.running_var, twin.bn.running_var)


def test_autocast_takes_a_16_bit_input_as_eager_does():
    """Under torch.autocast a model's fused module may get a bf16/fp16 x from the layer before
    it, with float32 parameters: the result is the float32 x's (autocast casts both to its dtype),
    as nn.Linear's is under autocast. A float64 module under autocast stays float64 (autocast
    casts no float64 tensor), within float64's rounding of the reference."""
    from fusedlib.reference import make_reference
    for kind in ("84", "33"):
        ref = make_reference(kind, 8, 6, seed=0)
        a, b = fusedlib.from_reference(copy.deepcopy(ref)), fusedlib.from_reference(copy.deepcopy(ref))
        x = torch.rand(5, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y16, y32 = b(x.bfloat16()), a(x)
            y_half = copy.deepcopy(a)(x.half())  # cast to bf16 by the rule, as eager autocast casts it
        assert torch.equal(y16, y32) and torch.equal(a.bn.running_mean, b.bn.running_mean)
        assert y_half.dtype == y32.dtype
        with pytest.raises(TypeError, match="x: expected dtype torch.float32"):
            b(x.bfloat16())  # outside autocast: the parameters' dtype
        r64 = copy.deepcopy(ref).double()
        f64 = fusedlib.from_reference(copy.deepcopy(r64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, y_ref = f64(x.double()), r64(x.double())
        assert y.dtype == torch.float64
        torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)


def test_scale_shape_and_mixed_dtypes_are_clear_errors():
    """A scale of neither 1 element nor out_features is refused when the module is made, naming
    scale_shape; from_reference refuses a model whose tensors are in two dtypes rather than
    converting its BatchNorm to the Linear's dtype without a word."""
    from fusedlib.reference import make_reference
    with pytest.raises(ValueError, match="scale_shape: expected 1 element or out_features=16"):
        FusedGemmScaleBatchNorm(32, 16, (3,))
    with pytest.raises(ValueError, match="scale_shape: expected 1 element for problem 84"):
        FusedGemmBatchNormScalingSoftmax(32, 16, scale_shape=(16,))  # (the CUDA kernels take 84's scalar only)
    assert FusedGemmScaleBatchNorm(32, 16, (1,)).scale.numel() == 1
    for fused_cls, ref_cls, args in ((FusedGemmBatchNormScalingSoftmax, GemmBatchNormScalingSoftmax, (8, 6)),
                                     (FusedGemmScaleBatchNorm, GemmScaleBatchNorm, (8, 6, (1, 1)))):
        kwargs = {"scale_shape": (1, 1)} if fused_cls is FusedGemmBatchNormScalingSoftmax else {}
        ref = ref_cls(*args, **kwargs)  # a one-element scale of any shape, as eager broadcasts it
        fused, x = fusedlib.from_reference(copy.deepcopy(ref)), torch.rand(5, 8)
        torch.testing.assert_close(fused(x), ref(x), rtol=1e-5, atol=1e-6)
    ref = make_reference("33", 8, 6, seed=0)
    ref.gemm.bfloat16()
    with pytest.raises(TypeError, match="more than one dtype"):
        fusedlib.from_reference(ref)
    assert fusedlib.from_reference(ref.bfloat16()).gemm.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("kind", ["84", "33"])
def test_an_empty_batch_gives_what_pytorch_gives(kind):
    """A batch of 0 rows (a filtered batch, say), as PyTorch's modules take it: an empty output in
    the same dtype, zero gradients for every parameter, num_batches_tracked counted in train mode
    and the running statistics untouched; eval mode too."""
    from fusedlib.reference import make_reference
    ref = make_reference(kind, 8, 6, seed=0)
    fused = fusedlib.from_reference(copy.deepcopy(ref))
    x = torch.rand(0, 8)
    for m in (ref, fused):
        y = m(x)
        assert y.shape == (0, 6) and y.dtype == torch.float32
        y.sum().backward()
    for (name, a), b in zip(fused.named_parameters(), ref.parameters()):
        assert a.grad is not None and torch.equal(a.grad, b.grad), name
    for name, b in ref.bn.named_buffers():
        assert torch.equal(getattr(fused.bn, name), b), name
    fused.eval()
    assert fused(x).shape == (0, 6) and fused.bn.num_batches_tracked.item() == 1


@pytest.mark.parametrize("kind", ["84", "33"])
def test_from_reference_keeps_a_frozen_batchnorm_and_frozen_parameters(kind):
    """A model in train mode with a frozen BatchNorm (``model.bn.eval()``) and frozen layers
    (``requires_grad_(False)``) converts to a fused module that is frozen the same way: the same
    output and buffers as the model, and no gradient where the model has none."""
    from fusedlib.reference import make_reference
    ref = make_reference(kind, 8, 6, seed=0)
    ref.train()
    ref.bn.eval()
    ref.gemm.requires_grad_(False)
    fused = fusedlib.from_reference(copy.deepcopy(ref))
    assert fused.training and not fused.bn.training
    assert [p.requires_grad for p in fused.parameters()] == [p.requires_grad for p in ref.parameters()]
    x = torch.rand(5, 8)
    torch.testing.assert_close(fused(x), ref(x), rtol=1e-5, atol=1e-6)
    assert torch.equal(fused.bn.running_mean, ref.bn.running_mean)


def test_forward_mode_ad_is_an_error_not_a_zero_tangent(module):
    """torch.func.jvp (forward-mode AD) through a fused module raises, naming it, where the
    operator below autograd would drop the tangent and return zeros."""
    module.eval()
    x, v = torch.rand(4, 8), torch.rand(4, 8)
    with pytest.raises(NotImplementedError, match="forward-mode AD"):
        torch.func.jvp(module, (x,), (v,))
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="forward-mode AD"):
        module(fwAD.make_dual(x, v))
    assert torch.isfinite(module(x)).all()  # the dual level closed: the forward as before


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev", "vmap"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_torch_func_transforms_are_a_clear_error(module, transform, mode):
    """torch.func's grad, vjp, jacrev and vmap through a fused module raise fusedlib's error,
    naming the transforms and what to use instead, rather than PyTorch's about an autograd.Function
    form or a batching rule; outside them the module runs as before."""
    module.train(mode == "train")
    x = torch.rand(4, 8)
    calls = {"grad": lambda: torch.func.grad(lambda t: module(t).sum())(x),
             "vjp": lambda: torch.func.vjp(module, x),
             "jacrev": lambda: torch.func.jacrev(module)(x),
             "vmap": lambda: torch.func.vmap(module)(x.reshape(2, 2, 8))}
    with pytest.raises(NotImplementedError, match="torch.func transforms .* not supported.*torch.autograd.grad"):
        calls[transform]()
    assert torch.isfinite(module(x)).all()


@pytest.mark.parametrize("kind", ["84", "33"])
def test_a_scale_or_batchnorm_that_does_not_fit_the_linear_is_an_error(kind):
    """A BatchNorm over another number of features than the Linear's outputs, or a scale that
    eager PyTorch's x * scale would broadcast otherwise than one value a column ((M, 1) scales
    rows, a third dimension changes the output's shape), is a clear error naming it, not an
    internal one or a silently flattened scale; (1, M) and (1, 1) give the flat scale's output."""
    from fusedlib.reference import make_reference
    module = fusedlib.from_reference(make_reference(kind, 8, 5, seed=0))
    x = torch.rand(4, 8)
    other = copy.deepcopy(module)
    other.bn = torch.nn.BatchNorm1d(7)
    with pytest.raises(ValueError, match="bn: expected num_features == gemm.out_features = 5 .*got 7"):
        other(x)
    bad, good = ((5, 1), (1, 5)) if kind == "33" else ((1, 1, 1), (1, 1))
    other = copy.deepcopy(module)
    other.scale = torch.nn.Parameter(module.scale.detach().reshape(bad))
    with pytest.raises(ValueError, match="scale: expected shape \\(k,\\) or \\(1, k\\)"):
        other(x)
    other.scale = torch.nn.Parameter(module.scale.detach().reshape(good))
    torch.testing.assert_close(other(x), module(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="scale_shape: expected shape"):
        FusedGemmScaleBatchNorm(8, 5, (5, 1))


@pytest.mark.parametrize("kind", ["84", "33"])
def test_an_in_place_op_after_the_module_keeps_its_backward(kind):
    """ReLU(inplace=True) after a fused module in eval mode (or with a frozen BatchNorm), as
    after the eager model: 33's backward reads no Y, so it saves none; 84's reads Y, and eager's
    softmax saves it too (both refuse the in-place op alike)."""
    from fusedlib.reference import make_reference
    ref = make_reference(kind, 8, 6, seed=0).eval()
    fused = fusedlib.from_reference(copy.deepcopy(ref))
    _in_place_relu_grads(ref, fused, torch.rand(5, 8), kind)


def _in_place_relu_grads(ref, fused, x: torch.Tensor, kind: str) -> list:
    """x's gradients through ReLU(inplace=True) after ``ref`` and after ``fused`` (None where the
    backward refuses the in-place op, which must be 84's in both)."""
    grads = []
    for m in (ref, fused):
        xg = x.clone().requires_grad_()
        try:
            torch.relu_(m(xg)).sum().backward()
            grads.append(xg.grad)
        except RuntimeError as exc:
            assert "inplace" in str(exc) and kind == "84"
            grads.append(None)
    assert (grads[0] is None) == (grads[1] is None) == (kind == "84")
    return grads


def test_the_operators_refuse_an_unknown_kind():
    """kind is "84" or "33": anything else is a clear error, not problem 33's output."""
    m, k = 5, 8
    args = (torch.rand(4, k), torch.rand(m, k), torch.zeros(m), torch.ones(m), torch.ones(m), torch.zeros(m),
            torch.zeros(m), torch.ones(m), torch.tensor(0))
    with pytest.raises(ValueError, match="kind: expected '84'"):
        fusedlib.ops.OPS["fused"](*args, "84 ", "fp32", False, 1e-5, 0.1)
    y, z = torch.rand(4, m), torch.rand(4, m)
    with pytest.raises(ValueError, match="kind: expected '84'"):
        fusedlib.ops.train_backward(y, y, z, args[0], args[1], torch.ones(1), args[4], args[5], "39", "fp32", 1e-5)


def test_the_train_backward_fake_gives_the_kernels_dtypes():
    """The backward operator's fake (torch.compile's shapes and dtypes) matches its CPU kernel
    with a bf16 Linear beside a float32 BatchNorm: dbias in the Linear's dtype (opcheck)."""
    n, k, m = 8, 6, 5
    args = (torch.randn(n, m), torch.rand(n, m), torch.randn(n, m), torch.randn(n, k).bfloat16(),
            torch.randn(m, k).bfloat16(), torch.ones(1), torch.ones(m), torch.zeros(m), "84", "fp32", 1e-5)
    torch.library.opcheck(fusedlib.ops.train_backward, args)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["84", "33"])
def test_the_checks_before_the_kernels_hold_on_cuda(kind):
    """On CUDA the forward first tries the C++ eager call (:func:`fusedlib.cuda.eager_forward`),
    not the CPU tests' route: there too forward-mode AD and torch.func's other transforms raise, a hook on gemm is an error, a
    frozen BatchNorm in a train-mode model (from_reference keeps it frozen) normalises with its
    running statistics and updates none, and in eval mode an in-place op after 33 keeps its
    backward (84's, as eager's, refuses it)."""
    from fusedlib.reference import make_reference
    ref = make_reference(kind, 64, 96, seed=0).cuda().train()
    ref.bn.eval()
    fused = fusedlib.from_reference(copy.deepcopy(ref))
    assert fused.training and not fused.bn.training and fused.gemm.weight.is_cuda
    x, v = torch.rand(32, 64, device="cuda"), torch.rand(32, 64, device="cuda")
    with pytest.raises(NotImplementedError, match="forward-mode AD"):
        torch.func.jvp(fused, (x,), (v,))
    with pytest.raises(NotImplementedError, match="forward-mode AD"):  # the 16-bit route's checks too
        torch.func.jvp(copy.deepcopy(fused).bfloat16(), (x.bfloat16(),), (v.bfloat16(),))
    for transform in (lambda: torch.func.grad(lambda t: fused(t).sum())(x),
                      lambda: torch.func.vmap(fused)(x.reshape(2, 16, 64))):
        with pytest.raises(NotImplementedError, match="torch.func transforms"):
            transform()
    handle = fused.gemm.register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(TypeError, match="gemm: has forward or backward hooks"):
        fused(x)
    handle.remove()
    before = fused.bn.running_mean.clone()
    torch.testing.assert_close(fused(x), ref(x), rtol=1e-5, atol=1e-6)
    assert torch.equal(fused.bn.running_mean, before) and fused.bn.num_batches_tracked.item() == 0
    ref.eval()
    fused.eval()
    grads = _in_place_relu_grads(ref, fused, x, kind)
    if kind == "33":
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
