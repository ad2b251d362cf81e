"""The reference models reproduce KernelBench level 2 problems 84 and 33/39 exactly."""
import pytest
import torch

from fusedlib.reference import (PRESETS, GemmBatchNormScalingSoftmax, GemmScaleBatchNorm, Shape, get_inputs,
                                make_reference, parse_shape, preset_of, presets_of, problem_kind)
from upstream import Upstream33, Upstream84




@pytest.mark.parametrize("ours,theirs,args", [
    (GemmBatchNormScalingSoftmax, Upstream84, (40, 24)),
    (GemmScaleBatchNorm, Upstream33, (40, 24, (24,))),
])
def test_same_seed_gives_bit_identical_parameters_and_outputs(ours, theirs, args):
    torch.manual_seed(7)
    a = ours(*args)
    torch.manual_seed(7)
    b = theirs(*args)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    x = torch.rand(16, 40)
    assert torch.equal(a(x), b(x))


def test_make_reference_matches_kernelbench_init():
    model = make_reference("39", 64, 32, seed=3)
    torch.manual_seed(3)
    upstream = Upstream33(64, 32, (32,))
    assert torch.equal(model.scale, upstream.scale)
    assert model.bn.eps == 1e-5 and model.bn.momentum == 0.1


def test_presets():
    assert PRESETS["84"] == Shape(1024, 8192, 8192)
    assert PRESETS["33"] == Shape(1024, 8192, 8192)
    assert PRESETS["39"] == Shape(16384, 4096, 4096)
    assert PRESETS["v0"] == Shape(128, 1024, 512)
    assert problem_kind("39") == "33" and problem_kind(84) == "84"


def test_parse_shape():
    assert parse_shape("257x1000->999") == Shape(257, 1000, 999)
    assert str(parse_shape("v0")) == "128x1024->512"
    for bad in ("12x3", "0x4->5", "axb->c"):
        with pytest.raises(ValueError, match="shape"):
            parse_shape(bad)
    with pytest.raises(ValueError, match="problem"):
        problem_kind("85")


def test_preset_of_names_each_problems_own_shape():
    """84 and 33 share 1024×8192→8192: the row's problem decides; v0 is every problem's; a
    problem at another problem's shape, or a sweep's size, is no preset."""
    assert preset_of("84", 1024, 8192, 8192) == "84" and preset_of(33, 1024, 8192, 8192) == "33"
    assert preset_of("39", 16384, 4096, 4096) == "39" and preset_of("84", 16384, 4096, 4096) is None
    assert preset_of("39", 128, 1024, 512) == "v0" and preset_of("84", 1024, 8192, 4096) is None
    rows = {"problem": ["84", "33", "39"], "batch": [1024, 128, 1024], "in_features": [8192, 1024, 8192],
            "out_features": [8192, 512, 8192]}
    assert presets_of(rows) == ["84", "v0", None]


def test_inputs():
    g = torch.Generator().manual_seed(0)
    x = get_inputs("7x33->65", "rand", g)
    assert x.shape == (7, 33) and x.min() >= 0 and x.max() < 1
    z = get_inputs("300x64->8", "offset", g) @ torch.randn(8, 64, generator=g).t()
    ratio = (z.mean(0).abs() / z.std(0)).median()
    assert 1e2 < ratio < 1e4  # |mean|/std ≈ 1e3
    with pytest.raises(ValueError, match="kind"):
        get_inputs("2x3->4", "uniform")
