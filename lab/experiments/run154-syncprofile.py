"""run154 (2 GPUs): where synchronising BatchNorm's statistics spends its time in the DDP train
step (sync-bench measured fused-sync 0.58 ms over fused-local at 84 tf32, and eager-syncbn 1.09 ms
over eager-local). Per implementation at 84's KernelBench shape: the step timed as sync-bench does
(barrier, events around one step), the steps back to back (20, one synchronize: a training loop),
and one profiled step per rank (CPU and CUDA: the collectives' place on the timeline). Writes
$OUT/syncprof.log and chrome traces of the fused steps."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
OUT = Path(os.environ.get("OUT", "/tmp"))
IMPLS = ("fused-sync", "fused-local", "eager-syncbn", "eager-local")


def _rank(rank: int, world: int, precision: str) -> None:
    import torch.distributed as dist

    from fusedlib.engine import cublas_precision
    from fusedlib.lab.syncbench import _model
    from fusedlib.reference import PRESETS
    dev = torch.device("cuda", rank)
    sh = PRESETS["84"]
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(sh.batch, sh.in_features, generator=g).to(dev)
    dy = torch.randn(sh.batch, sh.out_features, generator=g).to(dev)
    lines = []
    with cublas_precision("tf32" if precision == "tf32" else "fp32"):
        for impl in IMPLS:
            model = torch.nn.parallel.DistributedDataParallel(_model("84", impl, precision, dev), device_ids=[rank])

            def step():
                model.zero_grad(set_to_none=True)
                model(x).backward(dy)
            for _ in range(5):
                step()
            single = []
            for _ in range(20):
                torch.cuda.synchronize(dev)
                dist.barrier()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                step()
                b.record()
                torch.cuda.synchronize(dev)
                single.append(a.elapsed_time(b))
            torch.cuda.synchronize(dev)
            dist.barrier()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(20):
                step()
            b.record()
            torch.cuda.synchronize(dev)
            loop = a.elapsed_time(b) / 20
            single.sort()
            lines.append(f"rank {rank} {precision} {impl:12} one step median {single[10]:.3f} ms (min {single[0]:.3f}), "
                         f"20 back to back {loop:.3f} ms a step")
            torch.cuda.synchronize(dev)
            dist.barrier()
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(2):
                    step()
                torch.cuda.synchronize(dev)
            if impl.startswith("fused") and precision == "tf32":
                prof.export_chrome_trace(str(OUT / f"trace-{impl}-r{rank}.json"))
            lines.append(prof.key_averages().table(sort_by="device_time_total", row_limit=18, max_name_column_width=60))
            del model
    (OUT / f"syncprof-{precision}-r{rank}.log").write_text("\n".join(lines) + "\n")


def main():
    from fusedlib.lab.sync_demo import spawn_ranks
    for precision in ("tf32",):
        spawn_ranks(_rank, 2, precision, backend="nccl")
    for f in sorted(OUT.glob("syncprof-*.log")):
        print(f.name)
        print("\n".join(line for line in f.read_text().splitlines() if "back to back" in line))
    for f in OUT.glob("trace-*.json"):
        os.system(f"gzip -9 {f}")


if __name__ == "__main__":
    main()
