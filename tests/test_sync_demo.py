"""fusedlib.lab.sync_demo's launcher (:func:`~fusedlib.lab.sync_demo.spawn_ranks`): a rank that
fails shows why in the parent's exception (each rank's standard error goes to a file whose last
lines the exception carries), and a rank's process group is really torn down by
``destroy_process_group`` (nothing keeps it alive to interpreter exit), torch.compile'd or not."""
from __future__ import annotations

import os
import sys

import pytest
import torch
from torch.multiprocessing.spawn import ProcessExitedException

from fusedlib.lab import sync_demo


def _raising_worker(rank: int, world: int) -> None:
    import torch.distributed as dist
    if rank == 1:
        print("rank 1 about to fail", file=sys.stderr, flush=True)
        raise ValueError("rank 1 fails on purpose")
    dist.barrier()  # rank 0 waits for a rank that never comes: killed when rank 1 has failed


def _aborting_worker(rank: int, world: int) -> None:
    os.abort()  # as a C++ std::terminate would


def test_a_failing_rank_shows_its_traceback():
    with pytest.raises(ProcessExitedException) as info:
        sync_demo.spawn_ranks(_raising_worker, 2, timeout=300)
    message = str(info.value)
    assert info.value.error_index == 1 and info.value.exit_code == 1
    assert "rank 1's standard error" in message
    assert "rank 1 about to fail" in message and "ValueError: rank 1 fails on purpose" in message
    assert message.index("rank 1's standard error") < message.index("ValueError")


def test_a_rank_killed_by_a_signal_shows_where():
    with pytest.raises(ProcessExitedException) as info:
        sync_demo.spawn_ranks(_aborting_worker, 1, timeout=300)
    message = str(info.value)
    assert info.value.signal_name == "SIGABRT"
    # faulthandler's dump, to the rank's standard error, of the Python stack the signal hit
    assert "Fatal Python error: Aborted" in message and "_aborting_worker" in message


def _threads() -> list[str]:
    """This process's threads' names (Linux), the main thread's ("python...") left out."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return sorted(name for name in names if not name.startswith("python"))


def _teardown_worker(rank: int, world: int, compile_it: bool, out: str) -> None:
    import atexit
    sync_demo._worker(rank, world, (3, 2), "84", "fused", compile_it, out)

    def record():  # after spawn_ranks' barrier and destroy_process_group, before interpreter teardown
        with open(os.path.join(out, f"threads{rank}.txt"), "w") as f:
            f.write("\n".join(name for name in _threads() if name.startswith(("gloo", "pt_"))))
    atexit.register(record)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads listed from /proc (Linux)")
@pytest.mark.parametrize("compile_it", [False, True])
def test_destroy_process_group_ends_the_gloo_threads(compile_it, tmp_path):
    """The group's gloo threads and rank 0's TCPStore server end at destroy_process_group, not
    at interpreter exit (where each rank tore its group down on its own: a rank's pairs or store
    could go while another's still ran, and a gloo thread could touch a finalising interpreter)."""
    sync_demo.spawn_ranks(_teardown_worker, 2, compile_it, str(tmp_path), timeout=300)
    for rank in range(2):
        assert (tmp_path / f"threads{rank}.txt").read_text() == "", rank
    assert torch.load(tmp_path / "rank0.pt")["y"].shape == (3, 6)
