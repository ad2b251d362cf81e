"""The collectives of the data-parallel CUDA kernels' host code (``fusedlib/kernels/
torch_collectives.cuh``: torch.distributed's process group found by its name, its all-gather,
all-reduce and broadcast run as ``async_op=False`` runs them, waiting only on a Work the backend
returns, the GIL released while it blocks), built alone with the host compiler and run over
gloo in 3 processes: every rank's tensor gathered in rank order, the sum over the ranks, the
broadcast from a group's rank 0, also in a subgroup whose rank 0 is another process than the
default group's, called from Python with the GIL held, as the operators call them. (Holding the
GIL in the wait deadlocked here in one run of two: gdb showed gloo's worker thread waiting for the
GIL; holding it in the enqueue, in one run of about twenty: the worker frees the previous Work's
tensors under the GIL while it holds the queue's lock. The header lets it go for the whole
collective.) On GPUs the same code runs over NCCL inside the
kernels' calls (tests/test_sync_gpu.py)."""
from __future__ import annotations

import shutil

import pytest
import torch

from fusedlib import build
from fusedlib.lab import sync_demo

pytestmark = pytest.mark.skipif(shutil.which("c++") is None or not torch.distributed.is_available(),
                                reason="needs a C++ compiler and torch.distributed")

SOURCE = r'''
#include "torch_collectives.cuh"
at::Tensor all_gather(at::Tensor t, int64_t ranks, const std::string& group) {
  at::Tensor out = at::empty({ranks * t.size(0), t.size(1)}, t.options());
  fl::Collectives(group).all_gather(out, t);
  return out;
}
void all_reduce_sum(at::Tensor t, const std::string& group) { fl::Collectives(group).all_reduce_sum(t); }
void broadcast(at::Tensor t, const std::string& group) { fl::Collectives(group).broadcast(t, 0); }
'''


def _extension(directory: str):
    from torch.utils.cpp_extension import load_inline
    return load_inline("fusedlib_collectives_test", cpp_sources=SOURCE,
                       functions=["all_gather", "all_reduce_sum", "broadcast"],
                       extra_include_paths=[str(build.KERNEL_DIR)], build_directory=directory)


def _worker(rank: int, world: int, directory: str) -> None:
    import torch.distributed as dist
    ext = _extension(directory)  # built by the test's process: loaded here
    name = dist.group.WORLD.group_name
    gathered = ext.all_gather(torch.full((2, 3), rank + 1.0), world, name)
    assert torch.equal(gathered[::2, 0], torch.arange(1.0, world + 1)), gathered  # rank order
    total = torch.full((5,), rank + 1.0)
    ext.all_reduce_sum(total, name)
    assert torch.equal(total, torch.full((5,), world * (world + 1) / 2)), total
    row = torch.full((4,), rank + 7.0)
    ext.broadcast(row, name)
    assert torch.equal(row, torch.full((4,), 7.0)), row
    sub = dist.new_group([1, 2])  # (every rank takes part in making it)
    if rank in (1, 2):
        row = torch.full((4,), float(rank))
        ext.broadcast(row, sub.group_name)
        assert torch.equal(row, torch.full((4,), 1.0)), row  # the subgroup's rank 0 is process 1


def test_collectives_over_gloo(tmp_path):
    _extension(str(tmp_path))
    sync_demo.spawn_ranks(_worker, 3, str(tmp_path), timeout=300)  # (a hang fails, not stalls)
