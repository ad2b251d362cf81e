"""fusedlib.lab.trainstep (``python -m fusedlib train-step``): the step, the gradient error and
the command's argument checks, on the CPU (the timings themselves need the GPU)."""
import copy

import torch

import fusedlib
from fusedlib import cli
from fusedlib.lab import trainstep
from fusedlib.reference import make_reference


def test_step_sets_gradients_afresh_and_error_is_against_float64():
    ref = make_reference("84", 12, 7, seed=0)
    ref64 = copy.deepcopy(ref).double()
    x, dy = torch.rand(9, 12), torch.randn(9, 7)
    fused = fusedlib.from_reference(ref, stage="fused")
    step = trainstep.train_step(fused, dy)
    step(x)
    first = [p.grad.clone() for p in fused.parameters()]
    step(x)  # gradients replaced, not accumulated
    assert all(torch.equal(p.grad, g) for p, g in zip(fused.parameters(), first))
    trainstep.train_step(ref64, dy.double())(x.double())
    assert 0 < trainstep.grad_rel_err(fused, ref64) < 1e-5
    with torch.no_grad():
        fused.gemm.weight.grad.mul_(1.01)
    assert trainstep.grad_rel_err(fused, ref64) > 5e-3


def test_command_rejects_bad_arguments(capsys):
    assert cli.main(["train-step", "--impl", "fastest"]) == 2
    assert "impl" in capsys.readouterr().err
    assert cli.main(["train-step", "--iters", "3", "--rounds", "5"]) == 2
    capsys.readouterr()
    assert cli.main(["train-step", "--hold-us", "-1"]) == 2
    assert "--hold-us -1: expected a time of at least 0" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli.main(["train-step"]) == 2
        assert "CUDA" in capsys.readouterr().err


def test_precisions_of_the_step(capsys):
    """The bench's precisions and groups, and autocast-bf16: a float32 module built at the GEMM
    precision kernelbench gives bf16 (tf32); 16-bit steps in their dtype."""
    from fusedlib.kernelbench import gemm_precision
    assert trainstep.parse_precisions("all") == ["fp32", "tf32", "3xtf32"]
    assert trainstep.parse_precisions("16bit,autocast-bf16") == ["bf16", "fp16", "autocast-bf16"]
    assert trainstep.step_dtype("bf16") == torch.bfloat16 and trainstep.step_dtype("fp16") == torch.float16
    assert trainstep.step_dtype("autocast-bf16") == torch.float32 == trainstep.step_dtype("3xtf32")
    assert trainstep.build_precision("autocast-bf16") == gemm_precision("bf16") == "tf32"
    assert trainstep.build_precision("fp16") == "fp16"
    assert cli.main(["train-step", "--precision", "autocast-fp8"]) == 2
    assert "precision" in capsys.readouterr().err


def test_16bit_step_against_the_rounded_float64_model():
    """A bf16 module's step: gradients in bf16, against the float64 step of the model with the
    bf16 parameters, x and dY (the float32 model left as it was). bf16's gradient errors are
    large where sums cancel (the scale's), so the bound is loose; a gradient twice too large
    is still told apart."""
    from fusedlib.lab import bench
    ref = make_reference("84", 24, 8, seed=0).train()
    x, dy = torch.rand(16, 24, generator=torch.Generator().manual_seed(1)), torch.randn(16, 8)
    state0 = copy.deepcopy(ref.state_dict())
    model, module = bench.build_impl("fused", ref, "bf16")
    trainstep.train_step(model, dy.bfloat16(), module)(x.bfloat16())
    assert module.gemm.weight.grad.dtype == torch.bfloat16
    ref64 = trainstep.reference_step(ref, x, dy, "bf16")
    assert torch.equal(ref64.gemm.weight, ref.gemm.weight.bfloat16().double())    # rounded, then exact
    assert ref64.gemm.weight.grad.dtype == torch.float64
    assert all(torch.equal(v, state0[k]) for k, v in ref.state_dict().items())    # the float32 model untouched
    assert 0 < trainstep.grad_rel_err(module, ref64) < 0.3
    with torch.no_grad():
        module.bn.weight.grad.mul_(2)
    assert trainstep.grad_rel_err(module, ref64) > 0.9
    assert torch.equal(trainstep.reference_step(ref, x, dy, "fp32").gemm.weight, ref.gemm.weight.double())
