"""Drop-in modules: same state_dict as the reference, train/eval behaviour, clear errors."""
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
    fused84.load_state_dict(ref84.state_dict())
    ref84.load_state_dict(fused84.state_dict())


def test_from_reference_copies_state_and_mode():
    ref = GemmBatchNormScalingSoftmax(8, 5).double().eval()
    fused = fusedlib.from_reference(ref, stage="sums")
    assert not fused.training and fused.stage == "sums" and fused.precision == "fp32"
    assert fused.gemm.weight.dtype == torch.float64
    x = torch.rand(4, 8, dtype=torch.float64)
    assert torch.allclose(fused(x), ref(x), rtol=1e-12)
    with pytest.raises(TypeError, match="model"):
        fusedlib.from_reference(torch.nn.Linear(3, 4))


def test_repr_and_options():
    fused = FusedGemmBatchNormScalingSoftmax(8, 5, stage="fused", precision="3xtf32")
    assert "3xtf32" in repr(fused)
    fused.stage = "fused"
    with pytest.raises(ValueError, match="precision"):
        fused.stage = "naive"  # naive runs fp32 only
    with pytest.raises(ValueError, match="stage"):
        FusedGemmScaleBatchNorm(8, 5, (5,), stage="fastest")
    with pytest.raises(ValueError, match="precision"):
        FusedGemmScaleBatchNorm(8, 5, (5,), precision="fp16")
    with pytest.raises(ValueError, match="precision"):
        FusedGemmScaleBatchNorm(8, 5, (5,), stage="sums", precision="tf32")


@pytest.fixture
def module():
    return FusedGemmScaleBatchNorm(8, 5, (5,), stage="fused")


@pytest.mark.parametrize("bad,error,match", [
    ([[1.0] * 8] * 4, TypeError, "x: expected a torch.Tensor"),
    (torch.rand(4, 8, dtype=torch.float64), TypeError, "x: expected dtype torch.float32"),
    (torch.rand(4, 8, dtype=torch.float16), TypeError, "x: expected dtype"),
    (torch.rand(4, 8, device="meta"), ValueError, "x: expected a tensor on cpu"),
    (torch.rand(4, 2, 4), ValueError, "x: expected a 2-D tensor"),
    (torch.rand(4, 7), ValueError, "in_features=8"),
    (torch.rand(8, 4).t(), ValueError, "contiguous"),
    (torch.rand(0, 8), ValueError, "non-empty batch"),
    (torch.rand(1, 8), ValueError, "Expected more than 1 value per channel when training"),
])
def test_bad_input_is_a_clear_error(module, bad, error, match):
    with pytest.raises(error, match=match):
        module(bad)


def test_batch_of_one_is_fine_in_eval_mode(module):
    module.eval()
    assert torch.isfinite(module(torch.rand(1, 8))).all()
