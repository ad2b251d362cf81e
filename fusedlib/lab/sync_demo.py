"""(lab) Data parallelism on the CPU for the course (notebook 09) and the tests: a fused module
under ``fusedlib.convert_sync_batchnorm`` run by R gloo processes, one a rank, each on its own
rows of one batch, against one process on the whole batch (docs/design.md §14).

:func:`run_ranks` spawns the processes (``torch.multiprocessing``, the ``spawn`` start method:
it works from a notebook, since the worker lives in this module) and returns every rank's
output, dX, parameter gradients and buffers; :func:`one_process` is the same step in this
process on the concatenated batch; :func:`compare` puts the two side by side.
"""
from __future__ import annotations

import gc
import os
import socket
import tempfile
from pathlib import Path

import torch

__all__ = ["compare", "one_process", "run_ranks", "spawn_ranks"]

#: in_features, out_features of the demonstration model (small: the point is the arithmetic).
K, M = 5, 6


def _model(kind: str, stage: str):
    """The fused module of the step: float64, from a seeded reference with γ and β randomised."""
    import fusedlib
    from fusedlib.reference import make_reference
    ref = make_reference(kind, K, M, seed=5).double()
    with torch.no_grad():
        ref.bn.weight.copy_(torch.rand(M, generator=torch.Generator().manual_seed(7), dtype=torch.float64) + 0.5)
        ref.bn.bias.copy_(torch.randn(M, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
    return fusedlib.from_reference(ref, stage=stage).train()


def _batch(n: int):
    """x (N, K) with columns off zero and dY (N, M), the same in every process."""
    g = torch.Generator().manual_seed(6)
    return torch.randn(n, K, generator=g, dtype=torch.float64) + 2, torch.randn(n, M, generator=g, dtype=torch.float64)


def _step(module, x: torch.Tensor, dy: torch.Tensor, compile_it: bool = False) -> dict:
    """One train step's forward and backward (loss Σ Y∘dY); what it produced."""
    x = x.clone().requires_grad_()
    if compile_it:
        # torch.compile of a one-line function whose globals are a dict of its own, emptied after
        # the call: Dynamo stores the compiled graph, which holds the process group it traced (the
        # module's), in the compiled frame's globals. Compiling the module itself put it in
        # fusedlib.modules' globals, which kept the group alive past destroy_process_group
        # (:func:`_rank`) to interpreter exit.
        scope = {"module": module}
        exec("def call(x):\n    return module(x)\n", scope)
        y = torch.compile(scope["call"], backend="aot_eager", fullgraph=True)(x)
        scope.clear()
    else:
        y = module(x)
    (y * dy).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "grads": {n: p.grad.clone() for n, p in module.named_parameters()},
            "buffers": {n: b.clone() for n, b in module.named_buffers()}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stderr_to(path: str) -> None:
    """This process's standard error, file descriptor 2 itself, appended to ``path`` from now on:
    Python's tracebacks and warnings, what C++ writes (gloo, "terminate called ..." before an
    abort) and :mod:`faulthandler`'s dump of every thread's Python stack on a fatal signal
    (SIGABRT, SIGSEGV, ...), so that the parent can show why a rank died."""
    import faulthandler
    import sys
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(all_threads=True)


def _rank(rank: int, world: int, port: int, backend: str, fn, args: tuple, logs: str) -> None:
    import torch.distributed as dist
    _stderr_to(os.path.join(logs, f"rank{rank}.stderr"))
    # Before the group exists: torch.distributed.nn.functional's functions take ``group=group.WORLD``
    # as a default argument, evaluated when it is first imported; torch._dynamo imports it (via
    # torch.distributed.fsdp), and torch.compile, or a custom operator's first call (fusedlib's in a
    # backward), imports torch._dynamo. Imported after init_process_group, those defaults held the
    # default group past destroy_process_group: its gloo threads, pairs and rank 0's TCPStore
    # server were torn down only at interpreter exit, in no order between the ranks. Imported
    # now, the defaults are None and destroy_process_group really frees the group.
    import torch.distributed.nn  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":  # one GPU a rank
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    except BaseException:  # the other ranks may wait in a collective: no clean shutdown, exit now
        import sys
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # Every rank past its last collective before any tears its group down: a rank that left while
    # another's gloo pair still spoke to it aborted that process ("terminate called without an
    # active exception"), one run in a few.
    dist.barrier()
    dist.destroy_process_group()
    # ... and the group really gone now, in step with the other ranks, while the interpreter is
    # whole: reference cycles that hold it (torch.compile's artifacts) freed here rather than by
    # the collection at interpreter exit, where the gloo threads, pairs and rank 0's TCPStore
    # server would end in each rank on its own (see also the import above and :func:`_step`).
    gc.collect()


#: how many of its last lines of standard error an exception shows for each rank
STDERR_LINES = 40


def _stderr_tails(logs: str, world: int, first: int | None = None) -> str:
    """The last :data:`STDERR_LINES` lines of each rank's standard error (:func:`_stderr_to`),
    rank ``first`` (the one that failed) first; ranks that wrote nothing are left out."""
    parts = []
    for rank in sorted(range(world), key=lambda r: r != first):
        path = os.path.join(logs, f"rank{rank}.stderr")
        try:
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()[-STDERR_LINES:]
        except FileNotFoundError:  # (the rank died before it got there)
            continue
        if lines:
            parts.append(f"\n\n-- rank {rank}'s standard error, its last {len(lines)} lines:\n" + "\n".join(lines))
    return "".join(parts) or "\n\n-- (no rank wrote to its standard error)"


def spawn_ranks(fn, world: int, *args, backend: str = "gloo", timeout: float | None = None) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` new processes (the ``spawn`` start method), each
    a rank of one process group on this machine (the default group, on a free port): ``backend``
    "gloo" (CPU tensors, or CUDA tensors through the host: ``fn`` picks the device) or "nccl"
    (rank r on GPU r, its current device); ``fn`` must be
    importable (a module's top-level function). ``timeout`` (seconds): the ranks are killed if
    they have not all finished by then (a collective that never completes).

    Each rank's standard error goes to a file of a temporary folder (:func:`_stderr_to`, with
    :mod:`faulthandler` on), not to this process's: when a rank fails, or ``timeout`` passes, the
    exception raised here ends with the last lines each rank wrote (the failing rank's first), a
    Python traceback, a C++ message or the Python stacks at a fatal signal; what ranks that
    succeeded wrote (warnings) is dropped with the folder.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a rank raised out of ``init_process_group``
            (its traceback inside).
        torch.multiprocessing.ProcessExitedException: a rank exited with a non-zero code (``fn``
            raised: its traceback is in the rank's standard error) or died of a signal
            (``signal_name``, e.g. SIGABRT).
        TimeoutError: ``timeout`` passed first.
    """
    import time

    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException
    name = getattr(fn, "__name__", fn)
    with tempfile.TemporaryDirectory(prefix="fusedlib-ranks-") as logs:
        context = mp.spawn(_rank, args=(world, _free_port(), backend, fn, args, logs), nprocs=world, join=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not context.join(None if deadline is None else max(0.0, deadline - time.monotonic())):
                if deadline is not None and time.monotonic() >= deadline:
                    for process in context.processes:
                        process.kill()
                        process.join()
                    raise TimeoutError(f"{world} ranks of {name} did not finish within {timeout} s"
                                       + _stderr_tails(logs, world))
        except ProcessException as error:  # (join killed the other ranks: every log is complete)
            error.msg += _stderr_tails(logs, world, first=error.error_index)
            error.args = (error.msg,)
            raise


def _worker(rank: int, world: int, shards: tuple, kind: str, stage: str, compile_it: bool, out: str) -> None:
    import fusedlib
    module = fusedlib.convert_sync_batchnorm(_model(kind, stage))
    x, dy = _batch(sum(shards))
    lo, hi = sum(shards[:rank]), sum(shards[:rank + 1])
    torch.save(_step(module, x[lo:hi], dy[lo:hi], compile_it), Path(out) / f"rank{rank}.pt")


def run_ranks(kind: str, stage: str, shards: tuple[int, ...], compile_it: bool = False) -> list[dict]:
    """One train step of problem ``kind``'s fused module (``stage``) on R = len(shards) gloo
    processes, rank r holding ``shards[r]`` rows of one batch (float64, in_features 5,
    out_features 6). Returns each rank's dict: ``y`` and ``dx`` (its rows), ``grads`` (its part
    of each parameter's gradient) and ``buffers`` (the running buffers after the step).
    ``compile_it``: the forward under ``torch.compile(fullgraph=True)`` (backend aot_eager).

    Raises:
        torch.multiprocessing.spawn.ProcessException: a rank failed (:func:`spawn_ranks`: each rank's
            standard error's last lines inside).
    """
    with tempfile.TemporaryDirectory() as out:
        spawn_ranks(_worker, len(shards), tuple(shards), kind, stage, compile_it, out)
        return [torch.load(Path(out) / f"rank{r}.pt") for r in range(len(shards))]


def one_process(kind: str, stage: str, n: int) -> dict:
    """:func:`run_ranks`'s step in this process on the whole batch of ``n`` rows."""
    x, dy = _batch(n)
    return _step(_model(kind, stage), x, dy)


def compare(ranks: list[dict], one: dict) -> dict:
    """The ranks against one process: the largest absolute difference of Y and dX (the ranks'
    rows concatenated), of each parameter's gradient (the ranks' parts summed: each rank's
    loss is a sum over its rows, so the sum is the whole batch's gradient; DistributedDataParallel
    divides that sum by the number of ranks, for a mean loss) and of the running buffers (rank 0's), and whether
    every rank holds the same buffers bit for bit."""
    diff = {"Y": (torch.cat([r["y"] for r in ranks]) - one["y"]).abs().max().item(),
            "dX": (torch.cat([r["dx"] for r in ranks]) - one["dx"]).abs().max().item()}
    for name, g in one["grads"].items():
        diff[f"d {name}"] = (sum(r["grads"][name] for r in ranks) - g).abs().max().item()
    for name, b in one["buffers"].items():
        diff[name] = (ranks[0]["buffers"][name].double() - b.double()).abs().max().item()
    diff["buffers equal on every rank"] = all(torch.equal(r["buffers"][k], ranks[0]["buffers"][k])
                                              for r in ranks for k in one["buffers"])
    return diff
