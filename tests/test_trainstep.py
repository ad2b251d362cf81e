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
    if not torch.cuda.is_available():
        assert cli.main(["train-step"]) == 2
        assert "CUDA" in capsys.readouterr().err
