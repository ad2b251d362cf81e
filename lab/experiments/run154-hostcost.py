"""run154 part 2 (2 GPUs): the host's share of the synchronised step. At a small shape (256 x 512
-> 512, where every step is host-bound) the host time a call of each piece, steps back to back
with one synchronize at the end, on rank 0: the collectives alone (torch.distributed and the
functional collectives), the fused module's train step with and without the group (plain and
under DistributedDataParallel); then cProfile of 200 synchronised steps at 84's KernelBench
shape (the functions with the most own time). Writes $OUT/hostcost-r<rank>.log."""
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


def _per_call(fn, n=200) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def _rank(rank: int, world: int) -> None:
    import torch.distributed as dist

    import fusedlib
    from fusedlib.reference import make_reference
    dev = torch.device("cuda", rank)
    lines = []
    m = 512
    moments, gathered = torch.randn(4, m, device=dev), torch.empty(world, 4, m, device=dev)
    message = torch.randn(2 * m + 512 + 1, device=dev)
    fc = torch.ops._c10d_functional
    name = dist.group.WORLD.group_name
    pieces = {
        "dist.all_gather_into_tensor (4 x 512)": lambda: dist.all_gather_into_tensor(gathered, moments),
        "dist.all_reduce (1537)": lambda: dist.all_reduce(message),
        "functional all_gather + wait": lambda: fc.wait_tensor(fc.all_gather_into_tensor(moments, world, name)),
        "functional all_reduce + wait": lambda: fc.wait_tensor(fc.all_reduce(message, "sum", name)),
    }
    x = torch.randn(256, 512, device=dev)
    dy = torch.randn(256, m, device=dev)
    for precision in ("tf32", "3xtf32"):
        for sync in (False, True):
            for ddp in (False, True):
                mod = fusedlib.from_reference(make_reference("84", 512, m, seed=0), stage="fused", precision=precision)
                if sync:
                    mod = fusedlib.convert_sync_batchnorm(mod)
                mod = mod.to(dev).train()
                if ddp:
                    mod = torch.nn.parallel.DistributedDataParallel(mod, device_ids=[rank])

                def step(mod=mod):
                    mod.zero_grad(set_to_none=True)
                    mod(x).backward(dy)

                def fwd(mod=mod):
                    mod(x)
                label = f"{precision} {'sync ' if sync else 'local'} {'ddp  ' if ddp else 'plain'}"
                pieces[f"step    {label}"] = step
                pieces[f"forward {label}"] = fwd
    for label, fn in pieces.items():
        dist.barrier()
        lines.append(f"{label:42} {_per_call(fn):8.1f} us a call (host-bound, back to back)")
    # cProfile at 84's shape, fused-sync under DDP, tf32
    from fusedlib.lab.syncbench import _model
    from fusedlib.reference import PRESETS
    sh = PRESETS["84"]
    xb = torch.randn(sh.batch, sh.in_features, device=dev)
    dyb = torch.randn(sh.batch, sh.out_features, device=dev)
    for impl in ("fused-sync", "fused-local"):
        ddp = torch.nn.parallel.DistributedDataParallel(_model("84", impl, "tf32", dev), device_ids=[rank])

        def big(ddp=ddp):
            ddp.zero_grad(set_to_none=True)
            ddp(xb).backward(dyb)
        for _ in range(5):
            big()
        torch.cuda.synchronize()
        dist.barrier()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        for _ in range(100):
            big()
        prof.disable()
        host = (time.perf_counter() - t) / 100 * 1e3
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / 100 * 1e3
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(28)
        lines.append(f"\n== cProfile {impl} 84 tf32 DDP: host {host:.3f} ms a step (under cProfile), wall {wall:.3f} ms")
        lines.append(s.getvalue())
        del ddp
    (OUT / f"hostcost-r{rank}.log").write_text("\n".join(lines) + "\n")


def main():
    from fusedlib.lab.sync_demo import spawn_ranks
    spawn_ranks(_rank, 2, backend="nccl")
    print("\n".join(line for line in (OUT / "hostcost-r0.log").read_text().splitlines() if "a call" in line or "==" in line))


if __name__ == "__main__":
    main()
