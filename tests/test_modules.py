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
    (torch.rand(0, 8), ValueError, "x: expected a non-empty batch"),
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
