"""Host-side logic of the CUDA path that needs no GPU: the 3xTF32 weight split kept per
module is rebuilt whenever the weight changes, and nothing else is cached (eval mode
recomputes its coefficients every call)."""
import torch

import fusedlib
from fusedlib import algebra
from fusedlib import cuda as fl_cuda
from fusedlib.reference import make_reference


def _module():
    return fusedlib.from_reference(make_reference("33", 12, 7, seed=0), stage="fused", precision="3xtf32")


def test_weight_split_cache():
    m = _module()
    w = m.gemm.weight
    split = fl_cuda.weight_split(m, w, "3xtf32", "wgmma")
    assert split.shape == (2, 7, 12) and fl_cuda.weight_split(m, w, "3xtf32", "wgmma") is split
    assert torch.equal(split[0], algebra.round_tf32(w))
    assert torch.equal(split[1], algebra.round_tf32(w - split[0]))
    # in-place updates as optimizers and load_state_dict make them (the version bumps)
    for change in (lambda: w.mul_(2), lambda: m.load_state_dict(_module().state_dict())):
        before = fl_cuda.weight_split(m, w, "3xtf32", "wgmma")
        with torch.no_grad():
            change()
        after = fl_cuda.weight_split(m, w, "3xtf32", "wgmma")
        assert after is not before and torch.equal(after[0], algebra.round_tf32(w))


def test_weight_split_only_for_3xtf32_on_wgmma():
    m = _module()
    for precision, path in [("3xtf32", "mma"), ("tf32", "wgmma"), ("fp32", "simt")]:
        assert fl_cuda.weight_split(m, m.gemm.weight, precision, path) is None


def test_writes_through_data_need_invalidate_caches():
    m = _module()
    before = fl_cuda.weight_split(m, m.gemm.weight, "3xtf32", "wgmma")
    m.gemm.weight.data.mul_(2)  # .data has its own version counter: the cache cannot see this
    assert fl_cuda.weight_split(m, m.gemm.weight, "3xtf32", "wgmma") is before
    m.invalidate_caches()
    after = fl_cuda.weight_split(m, m.gemm.weight, "3xtf32", "wgmma")
    assert after is not before and torch.equal(after[0], algebra.round_tf32(m.gemm.weight))


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
