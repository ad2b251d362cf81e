"""Host-side logic of the CUDA path that needs no GPU: the eval-mode W' cache and the 3xTF32
weight split are rebuilt whenever a parameter or buffer they depend on changes."""
import torch

import fusedlib
from fusedlib import algebra
from fusedlib import cuda as fl_cuda
from fusedlib.reference import make_reference


def _eval_module():
    ref = make_reference("33", 12, 7, seed=0)
    ref(torch.rand(9, 12))
    ref.eval()
    return fusedlib.from_reference(ref, stage="fused", precision="tf32")


def test_eval_cache_is_reused_until_something_changes():
    m = _eval_module()
    w1, b1 = fl_cuda._eval_weights(m, "33")
    w2, _ = fl_cuda._eval_weights(m, "33")
    assert w1 is w2  # cached
    a, c = algebra.eval_coefficients("33", m.bn_state(), m.scale, torch.float32)
    assert torch.allclose(w1, m.gemm.weight * a[:, None]) and torch.allclose(b1, a * m.gemm.bias + c)
    # in-place updates as optimizers, load_state_dict and train steps make them (versions bump)
    changes = [lambda: m.gemm.weight.mul_(2), lambda: m.gemm.bias.add_(1), lambda: m.scale.neg_(),
               lambda: m.bn.weight.mul_(3), lambda: m.bn.bias.add_(1), lambda: m.bn.running_mean.add_(1),
               lambda: m.bn.running_var.mul_(2), lambda: m.bn.num_batches_tracked.add_(1),
               lambda: m.load_state_dict(_eval_module().state_dict())]
    for change in changes:
        before, _ = fl_cuda._eval_weights(m, "33")
        with torch.no_grad():
            change()
        after, _ = fl_cuda._eval_weights(m, "33")
        assert after is not before
        a, _ = algebra.eval_coefficients("33", m.bn_state(), m.scale, torch.float32)
        assert torch.allclose(after, m.gemm.weight * a[:, None])


def test_tf32_split_cache():
    m = _eval_module()
    split = fl_cuda._tf32_split(m, m.gemm.weight)
    assert split.shape == (2, 7, 12) and fl_cuda._tf32_split(m, m.gemm.weight) is split
    assert torch.equal(split[0], algebra.round_tf32(m.gemm.weight))
    assert torch.equal(split[1], algebra.round_tf32(m.gemm.weight - split[0]))
    with torch.no_grad():
        m.gemm.weight.mul_(2)
    assert fl_cuda._tf32_split(m, m.gemm.weight) is not split


def test_writes_through_data_need_invalidate_caches():
    m = _eval_module()
    before, _ = fl_cuda._eval_weights(m, "33")
    m.bn.weight.data.mul_(2)  # .data has its own version counter: the cache cannot see this
    assert fl_cuda._eval_weights(m, "33")[0] is before
    m.invalidate_caches()
    after, _ = fl_cuda._eval_weights(m, "33")
    a, _ = algebra.eval_coefficients("33", m.bn_state(), m.scale, torch.float32)
    assert after is not before and torch.allclose(after, m.gemm.weight * a[:, None])
