"""run156 (2 GPUs): the synchronised step's host time after its collectives moved into C++
(torch_op.cuh sync_train, torch_backward.cuh backward_passes_group: the two phases and the
collective in one call each; the collectives first through _c10d_functional, then the group's
own on the current stream, torch_common.cuh Collectives) and the cheaper eager_call gate; run155's
script (git 411546b) with the pieces that still exist. At 64 x 64 -> 64, rank 0, rank 1 doing the same:
  1. host time a call and cProfile of 300 forwards and 300 train steps, with and without the group;
  2. the forward's pieces: the operator under no_grad, _sync_train_cuda's body, ext.sync_train,
     torch.distributed's all-gather alone, the local operator;
  3. the backward's: ext.backward_passes_group against backward_passes, the all-reduce alone,
     train_backward_call (the backward's route) with and without the group.
Writes $OUT/hostprof-r0.log."""
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))


def _per_call(fn, n=300) -> float:
    import torch.distributed as dist
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - t
    torch.cuda.synchronize()
    return host / n * 1e6


def _profile(fn, n=300) -> str:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    return s.getvalue()


def _rank(rank: int, world: int) -> None:
    import torch.distributed as dist

    import fusedlib
    from fusedlib import algebra, ops
    from fusedlib.build import load_backward, load_stage
    from fusedlib.cuda import _sync_train_cuda, gemm_path
    from fusedlib.reference import make_reference
    dev = torch.device("cuda", rank)
    n, k, m = 64, 64, 64
    x = torch.randn(n, k, device=dev)
    dy = torch.randn(n, m, device=dev)
    lines = []
    mods = {}
    for sync in (False, True):
        mod = fusedlib.from_reference(make_reference("84", k, m, seed=0), stage="fused", precision="tf32")
        mods[sync] = (fusedlib.convert_sync_batchnorm(mod) if sync else mod).to(dev).train()
    for sync, mod in mods.items():
        def fwd(mod=mod):
            mod(x)

        def step(mod=mod):
            mod.zero_grad(set_to_none=True)
            mod(x).backward(dy)
        tag = "sync " if sync else "local"
        lines.append(f"forward {tag}: {_per_call(fwd):7.1f} us host a call")
        lines.append(f"step    {tag}: {_per_call(step):7.1f} us host a call")
        if rank == 0:
            lines.append(f"\n== cProfile forward {tag}\n" + _profile(fwd))
            lines.append(f"\n== cProfile step {tag}\n" + _profile(step))
        else:
            _profile(fwd), _profile(step)
    # the synchronised forward's pieces
    mod = mods[True]
    t = mod._tensors()
    bn = mod.bn
    name = mod.process_group.group_name
    args = (x, *t, "fused", "84", "tf32", bn.eps, bn.momentum, name)
    z = x.new_empty(n, m)
    with torch.no_grad():
        lines.append(f"\nop sync_train (no grad): {_per_call(lambda: ops._SYNC_OP(*args, z)):7.1f} us")
        lines.append(f"_sync_train_cuda body:   {_per_call(lambda: _sync_train_cuda(*args, z)):7.1f} us")
        ext = load_stage("fused", rank)
        path = gemm_path("tf32", dev, k, x, t[0])
        moments, gathered = x.new_zeros(4, m), x.new_empty(world, 4, m)
        lines.append(f"ext.sync_train:           {_per_call(lambda: ext.sync_train(x, *t, '84', 'tf32', bn.eps, bn.momentum, path, z, name, rank, world)):7.1f} us")
        lines.append(f"all_gather_into_tensor:   {_per_call(lambda: dist.all_gather_into_tensor(gathered, moments)):7.1f} us")
        lines.append(f"local op (fused, no grad): "
                     f"{_per_call(lambda: ops.OPS['fused'](x, *t, '84', 'tf32', True, bn.eps, bn.momentum, path)):7.1f} us")
        # the backward's pieces
        bext = load_backward(rank)
        yy, stats = ext.sync_train(x, *t, "84", "tf32", bn.eps, bn.momentum, path, z, name, rank, world)
        w, s, g, b = t[0], t[2], t[3], t[4]
        message = z.new_zeros(2 * m + k + 1)
        pargs = (dy, yy, z, s, g, b, "84", bn.eps, False)
        lines.append(f"backward_passes_group:   {_per_call(lambda: bext.backward_passes_group(*pargs, x, stats, name)):7.1f} us")
        lines.append(f"backward_passes (local): {_per_call(lambda: bext.backward_passes(*pargs)):7.1f} us")
        lines.append(f"all_reduce message:      {_per_call(lambda: dist.all_reduce(message)):7.1f} us")
        tb = lambda gn: ops.train_backward_call(dy, yy, z, x, w, s, g, b, "84", "tf32", bn.eps, True,  # noqa: E731
                                                stats if gn else None, gn)
        lines.append(f"train_backward_call sync:  {_per_call(lambda: tb(name)):7.1f} us")
        lines.append(f"train_backward_call local: {_per_call(lambda: tb(None)):7.1f} us")
    del algebra
    if rank == 0:
        (OUT / "hostprof-r0.log").write_text("\n".join(lines) + "\n")


def main():
    from fusedlib.lab.sync_demo import spawn_ranks
    spawn_ranks(_rank, 2, backend="nccl")
    print("\n".join(line for line in (OUT / "hostprof-r0.log").read_text().splitlines()
                    if " us" in line and "cProfile" not in line))


if __name__ == "__main__":
    main()
