"""run153: one NCCL case at a time, 2 ranks, with each rank's Python stack dumped if it hangs."""
import faulthandler
import sys
import time

import torch

sys.path.insert(0, "tests")
import test_sync_gpu as t  # noqa: E402
from fusedlib.lab import sync_demo  # noqa: E402


def worker(rank, world, cases, out):
    faulthandler.dump_traceback_later(45, exit=True)
    t._worker(rank, world, cases, out)
    print(f"rank {rank}: {len(cases)} cases done", flush=True)


if __name__ == "__main__":
    import tempfile
    for case in [("84", "fused", "tf32", (1000, 24), 3.0), ("84", "fused", "fp32", (1000, 24), 3.0),
                 ("33", "naive", "3xtf32", (1, 63), 3.0)]:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as out:
            try:
                sync_demo.spawn_ranks(worker, 2, [case], out, backend="nccl")
                print(case, f"ok in {time.time() - t0:.1f} s", flush=True)
            except Exception as exc:
                print(case, "FAILED:", str(exc)[-3000:], flush=True)
