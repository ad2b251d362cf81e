"""KernelBench interop: from_reference on KernelBench's own Model classes (structure, not
class), and the ModelNew source for KernelBench's evaluation (same seed, same parameters,
same outputs as Model on the CPU path)."""
import pytest
import torch
from torch import nn

import fusedlib
from fusedlib import kernelbench, modules
from fusedlib.cli import main as cli_main
from upstream import Upstream33, Upstream84


UPSTREAM = {"84": (Upstream84, (64, 48)), "33": (Upstream33, (64, 48, (48,))), "39": (Upstream33, (64, 48, (48,)))}


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("problem", ["84", "33"])
def test_from_reference_accepts_kernelbench_model(problem):
    cls, init = UPSTREAM[problem]
    torch.manual_seed(0)
    ref = cls(*init)
    fused = fusedlib.from_reference(ref, stage="fused")
    assert modules.reference_kind(ref) == problem
    x = torch.rand(16, 64)
    with torch.no_grad():
        assert _rel(fused(x), ref(x)) < 1e-5
    assert torch.allclose(fused.bn.running_var, ref.bn.running_var, atol=1e-6)


@pytest.mark.parametrize("mutate,match", [
    (lambda m: delattr(m, "bn"), "bn: expected an nn.BatchNorm1d"),
    (lambda m: setattr(m, "gemm", nn.Linear(64, 48, bias=False)), "gemm: expected an nn.Linear with a bias"),
    (lambda m: setattr(m, "bn", nn.BatchNorm1d(48, affine=False)), "bn: expected affine=True"),
    (lambda m: setattr(m, "bn", nn.BatchNorm1d(40)), "num_features == gemm.out_features = 48"),
    (lambda m: setattr(m, "scale", nn.Parameter(torch.ones(3))), "scale: expected 1 element for problem 84"),
    (lambda m: setattr(m, "softmax", nn.Softmax(dim=0)), "softmax: expected nn.Softmax\\(dim=1\\)"),
    # an 84 model with its softmax replaced or removed is not problem 33: refused, not read as one
    (lambda m: setattr(m, "softmax", nn.Identity()), "softmax: expected nn.Softmax\\(dim=1\\) \\(problem 84\\) or no"),
    (lambda m: delattr(m, "softmax"), "the model's forward calls a softmax"),
])
def test_from_reference_names_what_is_missing(mutate, match):
    ref = Upstream84(64, 48)
    mutate(ref)
    with pytest.raises(TypeError, match=match):
        fusedlib.from_reference(ref)


class _LoRALinear(nn.Linear):  # a subclass whose own forward the fused module would not run
    def forward(self, x):
        return super().forward(x) * 2


def _parametrize(m):
    from torch.nn.utils import parametrize
    parametrize.register_parametrization(m.gemm, "weight", nn.Identity())


@pytest.mark.parametrize("mutate,match", [
    (lambda m: setattr(m, "gemm", _LoRALinear(64, 48)), "gemm: expected an nn.Linear \\(the fused module reads"),
    (lambda m: m.bn.register_forward_hook(lambda mod, i, o: o * 2), "bn: has forward or backward hooks"),
    (lambda m: __import__("torch.nn.utils.prune").nn.utils.prune.l1_unstructured(m.gemm, "weight", amount=0.5),
     "gemm: has forward or backward hooks.*prune.remove"),
    (_parametrize, "gemm: has parametrizations \\(weight\\).*remove_parametrizations"),
    (lambda m: setattr(m, "scale", nn.Parameter(torch.ones(48, 1))), "scale: expected shape \\(k,\\) or \\(1, k\\)"),
])
def test_from_reference_refuses_what_it_would_not_copy(mutate, match):
    """A reference whose Linear or BatchNorm is a subclass, carries hooks (pruning's mask) or
    parametrizations, or whose scale broadcasts otherwise than one value a column (33's (M, 1):
    eager scales rows): each would give a fused module that computes something else; refused."""
    ref = Upstream33(64, 48, (48,))
    mutate(ref)
    with pytest.raises(TypeError, match=match):
        fusedlib.from_reference(ref)


def test_from_reference_rejects_other_modules():
    with pytest.raises(TypeError, match="model: not the KernelBench structure.*gemm: expected an nn.Linear"):
        fusedlib.from_reference(nn.Sequential(nn.Linear(3, 4)))
    with pytest.raises(TypeError, match="model: expected an nn.Module"):
        fusedlib.from_reference("Model")


@pytest.mark.parametrize("problem", ["84", "33", "39"])
@pytest.mark.parametrize("stage,precision", [("fused", "fp32"), ("naive", "3xtf32"), ("sums", "fp32")])
def test_model_new_matches_model(problem, stage, precision):
    """KernelBench's protocol: seed, Model(*init); seed, ModelNew(*init); same parameters,
    outputs within KernelBench's fp32 tolerance over train steps and then in eval mode."""
    cls, init = UPSTREAM[problem]
    namespace = {}
    exec(compile(kernelbench.model_new_source(problem, stage, precision), f"{problem}_new.py", "exec"), namespace)
    torch.manual_seed(42)
    ref = cls(*init)
    torch.manual_seed(42)
    new = namespace["ModelNew"](*init)
    assert (new.stage, new.precision) == (stage, precision)
    assert all(p.requires_grad for p in new.parameters())  # differentiable, like Model
    for key, value in ref.state_dict().items():
        assert torch.equal(new.state_dict()[key], value), key
    with torch.no_grad():
        for step in range(4):
            if step == 3:
                ref.eval(), new.eval()
            x = torch.rand(32, 64)
            assert torch.allclose(new(x), ref(x), atol=1e-4, rtol=1e-4)
    assert torch.allclose(new.bn.running_mean, ref.bn.running_mean, atol=1e-5)


def test_model_new_source_errors():
    with pytest.raises(ValueError, match="problem"):
        kernelbench.model_new_source("85")
    with pytest.raises(ValueError, match="precision"):
        kernelbench.model_new_source("84", "fused", "fp16")


def test_model_new_source_for_low_precision_evaluation(capsys):
    """--dtype bf16/fp16: the dtype and KernelBench's precision= argument named in the file; the
    GEMM precision tf32 unless one is given (exact for 16-bit operands); an unknown dtype refused."""
    src = kernelbench.model_new_source("33", dtype="bf16")
    assert "precision=bf16" in src and "precision='tf32'" in src
    assert "precision=fp32" not in kernelbench.model_new_source("33") and "evaluation" not in kernelbench.model_new_source("33")
    with pytest.raises(ValueError, match="dtype: expected one of"):
        kernelbench.model_new_source("84", dtype="float16")
    assert cli_main(["kernelbench", "--problem", "39", "--dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "precision='tf32'" in out and "fp16 evaluation" in out
    assert cli_main(["kernelbench", "--problem", "84", "--dtype", "bf16", "--precision", "3xtf32"]) == 0
    assert "precision='3xtf32'" in capsys.readouterr().out
    assert cli_main(["kernelbench", "--problem", "84"]) == 0
    assert "precision='fp32'" in capsys.readouterr().out


def test_cli_writes_model_new(tmp_path, capsys):
    out = tmp_path / "84_new.py"
    assert cli_main(["kernelbench", "--problem", "84", "--precision", "tf32", "-o", str(out)]) == 0
    src = out.read_text()
    assert "class ModelNew(FusedGemmBatchNormScalingSoftmax)" in src and "precision='tf32'" in src
    assert cli_main(["kernelbench", "--problem", "39"]) == 0
    assert "class ModelNew(FusedGemmScaleBatchNorm)" in capsys.readouterr().out


#: 33/39 in bf16 miss KernelBench's 1e-2 against eager bf16 by up to 0.035 while being closer to
#: float64 (5e-3 against eager's 7e-3): eager rounds Z∘s to bf16 once more before BatchNorm,
#: the fused module does not (docs/design.md §15). Open in issue 36 (KernelBench's bf16 evaluation).
_BF16_ROUNDING = pytest.mark.xfail(reason="eager bf16 rounds Z∘s once more than the fused module", strict=True)


def _low_precision_cases():
    for problem in ("84", "33", "39"):
        for dtype in (torch.bfloat16, torch.float16):
            for device in ("cpu", "cuda"):
                marks = [pytest.mark.gpu] if device == "cuda" else []
                if dtype == torch.bfloat16 and problem != "84":
                    marks.append(_BF16_ROUNDING)
                yield pytest.param(problem, dtype, device, marks=marks, id=f"{problem}-{dtype}-{device}")


@pytest.mark.parametrize("problem,dtype,device", list(_low_precision_cases()))
def test_model_new_matches_model_in_low_precision(problem, dtype, device):
    """KernelBench's evaluation at ``precision=`` bf16 or fp16 (docs/design.md §15): both models
    cast with ``.to(dtype)``, the inputs too, outputs within its tolerance for those dtypes
    (1e-2) over train steps and then in eval mode; ModelNew's output in the dtype."""
    cls, init = UPSTREAM[problem]
    namespace = {}
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    exec(compile(kernelbench.model_new_source(problem, dtype=name), f"{problem}_new.py", "exec"), namespace)
    torch.manual_seed(42)
    ref = cls(*init).to(device=device, dtype=dtype)
    torch.manual_seed(42)
    new = namespace["ModelNew"](*init).to(device=device, dtype=dtype)
    with torch.no_grad():
        for step in range(4):
            if step == 3:
                ref.eval(), new.eval()
            x = torch.rand(32, 64, generator=torch.Generator().manual_seed(step)).to(device=device, dtype=dtype)
            got, want = new(x), ref(x)
            assert got.dtype == want.dtype == dtype
            assert torch.allclose(got.float(), want.float(), atol=1e-2, rtol=1e-2), step
