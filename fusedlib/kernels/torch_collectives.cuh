// Data parallelism's collectives on the host (docs/design.md §14): the sync_train and
// backward_passes_group calls of the operators' CUDA kernels (torch_op.cuh, torch_backward.cuh)
// run their all-gather, broadcast and all-reduce through this. Host C++ (no CUDA): the CPU
// tests build it alone with the host compiler and run it over gloo (tests/test_collectives.py).
#pragma once
#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <optional>
#include <string>
#include <vector>

namespace fl {

// The collectives of the process group torch.distributed names group_name, run as
// torch.distributed runs them with async_op=False: on the current stream (asyncOp = false),
// nothing waiting on the host; a backend may then return no Work to wait on. One group lookup a
// call (the registry the functional collectives resolve names in).
struct Collectives {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  explicit Collectives(const std::string& group_name) : group(c10d::resolve_process_group(group_name)) {}

  void broadcast(at::Tensor& t, int root) const {  // root: the group's rank
    const Unlocked unlocked;
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.asyncOp = false;
    std::vector<at::Tensor> tensors{t};
    wait(group->broadcast(tensors, opts));
  }
  void all_gather(at::Tensor& out, at::Tensor& in) const {  // out: every rank's in, in rank order
    const Unlocked unlocked;
    c10d::AllgatherOptions opts;
    opts.asyncOp = false;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // (renamed all_gather_single in later torch)
    wait(group->_allgather_base(out, in, opts));
#pragma GCC diagnostic pop
  }
  void all_reduce_sum(at::Tensor& t) const {
    const Unlocked unlocked;
    c10d::AllreduceOptions opts;
    opts.asyncOp = false;
    std::vector<at::Tensor> tensors{t};
    wait(group->allreduce(tensors, opts));
  }
  // Called from Python, a collective lets the GIL go for its whole length, the enqueue as well as
  // the wait: gloo's worker thread takes the GIL to free the previous collective's tensors while
  // it holds its queue's lock, which the next enqueue waits for (py-spy saw exactly that: this
  // thread in ProcessGroupGloo::enqueue, the worker in gil_scoped_acquire under ~AsyncWork), and
  // a Work that blocks finishes on that thread too (gdb saw gloo's wait for the GIL).
  struct Unlocked {
    std::optional<pybind11::gil_scoped_release> released;
    Unlocked() {
      if (PyGILState_Check()) released.emplace();
    }
  };
  static void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    if (work) work->wait();
  }
};

}  // namespace fl
