"""(lab) ``python -m fusedlib sync-bench``: the data-parallel train step (docs/design.md §14) on R
GPUs of one host, one process a rank over NCCL, each rank at a problem's KernelBench shape (weak
scaling: the global batch grows with R), into ``results/<gpu>/sync.csv``.

Every rank runs the same DistributedDataParallel train step — forward, backward of Σ Y∘dY with
DDP's all-reduce of the weight gradients — of each implementation:

* ``fused-sync``: the fused module (stage ``fused``) with ``process_group``: global batch statistics;
* ``fused-local``: the same without a group (each rank's own statistics): the difference is what
  synchronising BatchNorm costs the fused step;
* ``eager-syncbn``: the reference model with ``nn.SyncBatchNorm`` (PyTorch's way);
* ``eager-local``: the reference model as it is;
* ``fused-sync-nobcast``, ``eager-syncbn-nobcast``: the two synchronised ones under DDP with
  ``broadcast_buffers=False``. Their running buffers are the same on every rank already, so DDP's
  broadcast of rank 0's buffers before each forward (a collective, and a point where the ranks
  wait for each other) changes nothing for them: the README's advice. The local ones need it
  to keep rank 0's buffers, and keep DDP's default.

The fused module runs at the precision; the eager ones at its PyTorch peer (tf32 with TF32
cuBLAS, fp32 and 3xtf32 against fp32). Timing: the implementations in turn, a barrier and CUDA
events around each step, ``--iters`` steps each after ``--warmup``; rank 0's median, min and max
(the step's collectives keep the ranks in step); ``loop_ms``: ``--iters`` steps back to back
between two events, a training loop's time a step (the host's launches overlap the GPU's work,
which the barrier of the one-step timing prevents), in ``--rounds`` rounds with the
implementations in turn in each, the median round (with one round, two implementations that
run the same code at world size 1 differed by up to 9 %). World size 1 runs the same DDP step in one
process, the baseline of weak-scaling efficiency (t₁ / t_R). Where a step's time goes (the
collectives' kernels, the host's launches) is for a profile: lab/experiments/run154-*.py.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

from . import bench, records

#: sync.csv's columns, in order.
COLUMNS = ["problem", "batch_per_rank", "in_features", "out_features", "world", "precision", "impl", "median_ms",
           "min_ms", "max_ms", "loop_ms", "iters", "rounds", "gpu", "torch", "cuda", "commit", "timestamp"]
IMPLS = ("fused-sync", "fused-local", "eager-syncbn", "eager-local", "fused-sync-nobcast", "eager-syncbn-nobcast")
#: The record of the kernel sources the rows were measured on, beside the CSV.
SOURCES = "sync.sources.json"


def _model(problem: str, impl: str, precision: str, device):
    """The module of ``impl`` on ``device`` in train mode (seeded reference, as the bench's)."""
    import torch

    import fusedlib
    from ..reference import PRESETS, make_reference, problem_kind
    sh = PRESETS[problem]
    ref = make_reference(problem_kind(problem), sh.in_features, sh.out_features, seed=0)
    if impl.startswith("fused"):
        module = fusedlib.from_reference(ref, stage="fused", precision=precision)
        if impl.startswith("fused-sync"):
            module = fusedlib.convert_sync_batchnorm(module)
    else:
        module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(ref) if impl.startswith("eager-syncbn") else ref
    return module.to(device).train()


def _timed(dev, fn) -> float:
    """ms of ``fn()`` on ``dev`` between two CUDA events, started on every rank at once (a barrier
    after the device's queue has drained)."""
    import torch
    import torch.distributed as dist
    torch.cuda.synchronize(dev)
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize(dev)
    return start.elapsed_time(end)


def _rank(rank: int, world: int, problems, precisions, impls, iters: int, warmup: int, rounds: int, out: str) -> None:
    import torch

    from ..engine import cublas_precision
    from ..reference import PRESETS
    dev = torch.device("cuda", rank)
    rows = []
    for problem in problems:
        sh = PRESETS[problem]
        g = torch.Generator().manual_seed(1 + rank)
        x = torch.randn(sh.batch, sh.in_features, generator=g).to(dev)
        dy = torch.randn(sh.batch, sh.out_features, generator=g).to(dev)
        for precision in precisions:
            steps = {}
            for impl in impls:
                model = torch.nn.parallel.DistributedDataParallel(_model(problem, impl, precision, dev),
                                                                  device_ids=[rank],
                                                                  broadcast_buffers=not impl.endswith("-nobcast"))

                def step(model=model):
                    model.zero_grad(set_to_none=True)
                    model(x).backward(dy)
                steps[impl] = step
            peer = "tf32" if precision == "tf32" else "fp32"
            times = {impl: [] for impl in impls}
            with cublas_precision(peer):
                for _ in range(warmup):
                    for step in steps.values():
                        step()
                for _ in range(iters):
                    for impl, step in steps.items():
                        times[impl].append(_timed(dev, step))
                loops = {impl: [] for impl in impls}
                for _ in range(rounds):
                    for impl, step in steps.items():
                        loops[impl].append(_timed(dev, lambda step=step: [step() for _ in range(iters)]) / iters)
            for impl in impls:
                t = sorted(times[impl])
                rows.append({"problem": problem, "batch_per_rank": sh.batch, "in_features": sh.in_features,
                             "out_features": sh.out_features, "world": world, "precision": precision, "impl": impl,
                             "median_ms": t[len(t) // 2], "min_ms": t[0], "max_ms": t[-1],
                             "loop_ms": sorted(loops[impl])[rounds // 2], "iters": iters, "rounds": rounds})
            del steps
            torch.cuda.empty_cache()
    if rank == 0:
        torch.save(rows, Path(out) / "rows.pt")


def measure(world: int, problems, precisions, impls, iters: int, warmup: int, env: dict, rounds: int = 5
            ) -> list[dict]:
    """Rows of :data:`COLUMNS` at world size ``world`` (``world`` processes on GPUs 0 … R−1)."""
    import torch

    from .sync_demo import spawn_ranks
    with tempfile.TemporaryDirectory() as out:
        spawn_ranks(_rank, world, tuple(problems), tuple(precisions), tuple(impls), iters, warmup, rounds, out,
                    backend="nccl")
        rows = torch.load(Path(out) / "rows.pt")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for r in rows:
        for key in ("median_ms", "min_ms", "max_ms", "loop_ms"):
            r[key] = float(f"{r[key]:.6g}")
        r.update(gpu=env["gpu"], torch=env["torch"], cuda=env["cuda"], commit=env["commit"], timestamp=now)
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world", default="1,2", help="comma list of world sizes (GPUs of this host), default 1,2")
    p.add_argument("--problem", default="84,33", help="comma list of 84, 33, 39 (default 84,33)")
    p.add_argument("--precision", default="tf32,3xtf32", help="comma list of fp32, tf32, 3xtf32 (default tf32,3xtf32)")
    p.add_argument("--impl", default="all", help=f"comma list of {', '.join(IMPLS)}, or all (default)")
    p.add_argument("--iters", type=int, default=20, help="timed steps of each implementation")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps of each first")
    p.add_argument("--rounds", type=int, default=5, help="rounds of --iters steps back to back (loop_ms: the median)")
    p.add_argument("--out", type=Path, help="CSV to write (default results/<gpu>/sync.csv)")
    p.add_argument("--fresh", action="store_true", help="start a new file (else append)")


def main(args) -> int:
    try:
        from ..reference import PROBLEMS
        worlds = [int(w) for w in args.world.split(",")]
        problems = bench.parse_list(args.problem, tuple(PROBLEMS), what="problem")
        precisions = bench.parse_list(args.precision, bench.PRECISIONS, what="precision")
        impls = bench.parse_list(args.impl, IMPLS, what="impl")
        if args.iters < 1 or args.rounds < 1 or args.warmup < 0 or min(worlds) < 1:
            raise ValueError("--iters, --rounds and --world must be at least 1, --warmup at least 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch
    if torch.cuda.device_count() < max(worlds):
        print(f"error: sync-bench --world {max(worlds)} needs that many CUDA devices, this host has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    env = records._environment()
    try:
        out = records.results_csv(args.out, env, "sync.csv", COLUMNS, SOURCES, args.fresh)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for world in worlds:
        rows = measure(world, problems, precisions, impls, args.iters, args.warmup, env, args.rounds)
        bench.append_rows(out, rows, COLUMNS)
        for r in rows:
            print(f"world {world} {r['problem']} {r['precision']:6} {r['impl']:12} {r['median_ms']:8.3f} ms "
                  f"(back to back {r['loop_ms']:.3f} ms)")
    print(f"wrote {out}")
    return 0
