"""Host-side logic of the CUDA path that needs no GPU: nothing derived from the parameters is
kept between calls (3xtf32 splits W inside the GEMM; eval mode recomputes its coefficients
every call), so writes that bypass the version counter are always seen."""
import torch

import fusedlib
from fusedlib.reference import make_reference


def _module():
    return fusedlib.from_reference(make_reference("33", 12, 7, seed=0), stage="fused", precision="3xtf32")


def test_module_keeps_no_state_beside_its_parameters_and_buffers():
    """The module's attributes after forwards are what it had before: no cache appears, and
    invalidate_caches (kept for old code) changes nothing."""
    m = _module()
    before = set(vars(m))
    m(torch.rand(9, 12))
    m.invalidate_caches()
    m.eval()(torch.rand(3, 12))
    assert set(vars(m)) == before
    assert not any("cache" in name or "split" in name for name in vars(m))


def test_writes_through_data_are_seen():
    """A write through .data (its own version counter) shows in the next 3xtf32 forward."""
    m = _module()
    ref = make_reference("33", 12, 7, seed=0)
    x = torch.rand(9, 12, dtype=torch.float64)
    m, ref = m.double(), ref.double()
    m(x), ref(x)
    m.gemm.weight.data.mul_(2)
    ref.gemm.weight.data.mul_(2)
    assert torch.allclose(m(x), ref(x), atol=1e-9)


def test_eval_mode_keeps_no_folded_weights():
    """Eval mode reads the parameters every call: a write through .data shows at once."""
    ref = make_reference("84", 12, 7, seed=0)
    ref(torch.rand(9, 12))
    ref.eval()
    m = fusedlib.from_reference(ref, stage="fused")
    x = torch.rand(5, 12)
    y1 = m(x)
    m.bn.weight.data.mul_(2)
    ref.bn.weight.data.mul_(2)
    y2 = m(x)
    assert not torch.allclose(y1, y2)
    assert torch.allclose(y2, ref(x), atol=1e-6)
