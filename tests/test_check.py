"""fusedlib.check: the case generator, the case model and the pass rule, which must reject
wrong, non-finite or stale results as surely as it accepts the stage algebra."""
import pytest
import torch

from fusedlib import algebra, check
from fusedlib.reference import PRESETS, parse_shape

KEYS = {"problem", "stage", "mode", "precision", "shape", "seed", "input_kind", "max_abs_err", "rel_err",
        "buffer_rel_err", "ref_fp32_rel_err", "fp32_noise", "budget", "finite", "passed"}


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_run_case_record(problem, mode):
    rec = check.run_case(problem, "fused", mode, "fp32", "7x33->65", seed=1, input_kind="randn")
    assert KEYS <= set(rec)
    assert rec["shape"] == "7x33->65" and rec["problem"] == problem and rec["mode"] == mode
    assert rec["passed"] and rec["finite"]
    assert 0 <= rec["rel_err"] <= rec["budget"] and rec["budget"] >= check.BUDGET["fp32"]
    assert rec["buffer_rel_err"] <= 1e-5


def test_case_model_randomises_parameters_and_buffers():
    ref, _ = check.case_model("33", "7x33->65", seed=3)
    assert ref.scale[0] == 0 and ref.scale[1] < 0
    assert not torch.equal(ref.bn.weight, torch.ones(65)) and not torch.equal(ref.bn.bias, torch.zeros(65))
    assert not torch.equal(ref.bn.running_mean, torch.zeros(65))
    assert not torch.equal(ref.bn.running_var, torch.ones(65)) and (ref.bn.running_var > 0).all()
    again, _ = check.case_model("33", "7x33->65", seed=3)
    other, _ = check.case_model("33", "7x33->65", seed=4)
    for key, value in ref.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    assert not torch.equal(ref.bn.running_mean, other.bn.running_mean)
    ref84, _ = check.case_model("84", "2x64->3", seed=0)
    assert 0.5 <= ref84.scale.item() < 1.5 and ref84.scale.item() != 1.0


def _wrap_stage_forward(monkeypatch, change):
    original = algebra.stage_forward

    def wrapped(kind, stage, x, weight, bias, scale, bn, training, precision="fp32"):
        return change(original(kind, stage, x, weight, bias, scale, bn, training, precision), bn)
    monkeypatch.setattr(algebra, "stage_forward", wrapped)


@pytest.mark.parametrize("name,change,passes", [
    ("unchanged", lambda y, bn: y, True),
    ("relative error 1e-4", lambda y, bn: y * (1 + 1e-4), False),
    ("one NaN", lambda y, bn: _set(y, 0, 0, float("nan")), False),
    ("one inf", lambda y, bn: _set(y, 1, 2, float("inf")), False),
])
def test_pass_rule_rejects_wrong_outputs(monkeypatch, name, change, passes):
    _wrap_stage_forward(monkeypatch, change)
    rec = check.run_case("33", "sums", "train", "fp32", "7x33->65", seed=0)
    assert rec["passed"] is passes, name
    assert rec["finite"] is (name in ("unchanged", "relative error 1e-4"))


def _set(y, i, j, value):
    y = y.clone()
    y[i, j] = value
    return y


def test_pass_rule_rejects_wrong_running_buffers(monkeypatch):
    def stale_var(y, bn):
        with torch.no_grad():
            bn.running_var.mul_(1 + 1e-3)
        return y
    _wrap_stage_forward(monkeypatch, stale_var)
    rec = check.run_case("84", "fold", "train", "fp32", "7x33->65", seed=0)
    assert rec["buffer_rel_err"] > 1e-4 and not rec["passed"]


@pytest.mark.parametrize("stage", algebra.STAGES)
def test_tf32_budget_would_not_pass_as_fp32(stage):
    """tf32 errors (≈ 1e-4 … 1e-3) pass against the tf32 budget only: the fp32 budget bites."""
    rec = check.run_case("33", stage, "train", "tf32", "257x100->99", seed=0)
    assert rec["passed"] and check.BUDGET["fp32"] < rec["rel_err"] <= check.BUDGET["tf32"]


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage,precision", list(check.combos(algebra.STAGES, ("fp32", "3xtf32"))))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_large_offset_inputs_pass(problem, stage, precision, mode):
    """Column |mean|/std ≈ 1e3: every stage within its budget (PyTorch's own fp32 error sets it)."""
    for shape in ("7x33->65", "257x100->99"):
        rec = check.run_case(problem, stage, mode, precision, shape, seed=2, input_kind="offset")
        assert rec["passed"], rec


def test_combos_pair_every_stage_with_every_precision():
    assert list(check.combos(["naive", "fused"], ["tf32", "fp32"])) == [
        ("naive", "tf32"), ("naive", "fp32"), ("fused", "tf32"), ("fused", "fp32")]
    assert len(list(check.combos(algebra.STAGES, algebra.PRECISIONS))) == 12


def test_iter_cases_defaults():
    cases = list(check.iter_cases(["84", "33", "39"], algebra.STAGES, ["train", "eval"], algebra.PRECISIONS,
                                  None, seeds=2))
    # 3 problems × (4 stages × 3 precisions) × 2 modes × 4 shapes × 2 seeds (rand/randn: no offset to drop)
    assert len(cases) == 3 * 12 * 2 * 4 * 2
    assert {c["shape"] for c in cases} == {"7x33->65", "2x64->3", "257x100->99", str(PRESETS["v0"])}
    assert {(c["stage"], c["precision"]) for c in cases} == {
        (s, p) for s in algebra.STAGES for p in algebra.PRECISIONS}
    assert {c["input_kind"] for c in cases if c["shape"] == "128x1024->512"} == {"randn"}
    assert all(c["device"] == "cpu" for c in cases)
    gpu = list(check.iter_cases(["39"], ["fused"], ["train"], algebra.PRECISIONS, None, seeds=5, device="cuda"))
    assert str(PRESETS["39"]) in {c["shape"] for c in gpu}
    assert {c["input_kind"] for c in gpu} == {"rand", "randn", "offset"}
    assert not any(c["precision"] == "tf32" and c["input_kind"] == "offset" for c in gpu)


def test_iter_cases_input_kinds_cycle_over_seeds():
    cases = list(check.iter_cases(["84"], ["naive"], ["train"], ["fp32"], ["2x64->3"], seeds=4,
                                  input_kinds=["offset", "rand"]))
    assert [c["input_kind"] for c in cases] == ["offset", "rand", "offset", "rand"]
    assert [c["seed"] for c in cases] == [0, 1, 2, 3]


@pytest.mark.parametrize("kwargs,match", [
    (dict(precision="bf16"), "precision"),
    (dict(stage="fastest"), "stage"),
    (dict(mode="inference"), "mode"),
    (dict(problem="85"), "problem"),
    (dict(shape="12x3"), "shape"),
])
def test_run_case_rejects_bad_arguments(kwargs, match):
    args = dict(problem="84", stage="fused", mode="train", precision="fp32", shape="2x64->3", seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        check.run_case(**args)


GRAD_CPU_CASES = list(check.iter_grad_cases(["84", "33"], algebra.STAGES, ("train", "eval"), algebra.PRECISIONS,
                                            ["7x33->65", "257x100->99"], seeds=1))


@pytest.mark.parametrize("case", GRAD_CPU_CASES, ids=lambda c: "-".join(str(v) for k, v in c.items() if k != "device"))
def test_grad_cases_pass_on_the_cpu(case):
    """Every stage's CPU backward (the specification) passes run_grad_case's rule."""
    rec = check.run_grad_case(**case)
    assert set(rec["grad_errs"]) == set(check.GRAD_NAMES)
    assert rec["passed"], rec


@pytest.mark.parametrize("problem", ["84", "33"])
@pytest.mark.parametrize("stage", algebra.STAGES)
def test_train_dweight_on_offset_inputs(problem, stage):
    """On inputs far from zero (offset: |x̄| ≈ 1e3, spread 1) dW = dZ'ᵀ(X − x̄) passes the rule
    and is at least 10× closer to float64 than PyTorch's own fp32 dW = dZᵀX (which cancels)."""
    rec = check.run_grad_case(problem, stage, "train", "fp32", "257x100->99", seed=0, input_kind="offset")
    assert rec["passed"], rec
    assert rec["grad_errs"]["gemm.weight"] * 10 <= rec["ref_grad_errs"]["gemm.weight"], rec


def _wrap_train_backward(monkeypatch, change):
    original = algebra.train_backward_fused

    def wrapped(*args, **kwargs):
        return change(list(original(*args, **kwargs)))
    monkeypatch.setattr(algebra, "train_backward_fused", wrapped)


@pytest.mark.parametrize("name,change", [
    ("dweight off by 1e-4", lambda g: g[:1] + [g[1] * (1 + 1e-4)] + g[2:]),
    ("dx with one NaN", lambda g: [_set(g[0], 0, 0, float("nan"))] + g[1:]),
    ("a bias gradient not zero", lambda g: g[:2] + [g[2] + 1e-12] + g[3:]),
])
def test_grad_rule_rejects_wrong_gradients(monkeypatch, name, change):
    _wrap_train_backward(monkeypatch, change)
    rec = check.run_grad_case("84", "fused", "train", "fp32", "7x33->65", seed=0)
    assert not rec["passed"], name


def test_iter_grad_cases_defaults():
    cases = list(check.iter_grad_cases(["84"], ["fused"], ["train"], ["tf32"], seeds=2, device="cuda"))
    assert [c["shape"] for c in cases] == [str(parse_shape(s)) for s in check.GRAD_SHAPES["cuda"] for _ in range(2)]
    assert [c["input_kind"] for c in cases] == ["rand", "randn"] * 3
