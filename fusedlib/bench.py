"""``python -m fusedlib bench``: time every stage and peer in one process on the GPU.

Method (docs/design.md §6, as KernelBench times its models): for each table (problem, shape,
mode, precision) every implementation is built in this process, its module state reset (the
table's saved ``state_dict``) and one call compared with a float64 reference of the same
model, input and mode: rel_err = ‖y − y64‖_F / ‖y64‖_F. Then the table's implementations are
timed together, round-robin (:func:`time_round_robin`): each gets its ``--warmup`` untimed
calls (≥ 10), then in each of R rounds every implementation in turn makes about n/R of its
n timed calls (the remainder goes to the first rounds). n is ``--iters`` (≥ 50), raised for
short calls until the slowest implementation's timed calls add up to ``--min-time-ms``
(500 ms, at most 1000 calls: :func:`table_iters`), R is ``--rounds`` (5) or one per 10
calls if more; the ``iters`` column records n. Each timed call is preceded by a 256 MiB write that
flushes the L2 cache and timed with a pair of CUDA events, the device synchronized after
it; the median (quoted), minimum and maximum of an implementation's calls are recorded in
ms, and beside them ``host_us``, the median host (CPU) time of a call: the time to enqueue
one forward, measured around the call while the GPU is still busy with the flush (a forward
whose host time exceeds the flush's ≈ 85 µs on the H100 leaves the GPU idle). Why rounds: the GPU's clocks drift (boost, temperature) during a table, so that timed
one after the other an implementation late in a table looked 2-3 % slower on the H100 than
an equal one early in it; interleaved, the drift falls on all implementations alike and
the order effect disappears.

Implementations (the ``impl`` column, :data:`fusedlib.costmodel.IMPLS`): the stages
``naive``, ``fold``, ``sums``, ``fused`` (:func:`fusedlib.from_reference`; CUDA kernels on
CUDA tensors); the peers ``eager`` (the reference module), ``compile``
(``torch.compile`` mode "default"), ``compile_max_autotune`` (mode
"max-autotune-no-cudagraphs"), both static-shape and compiled afresh for each table, and
``gemm_only`` (``F.linear``: the floor a fused version is judged against). Precisions: every
stage runs fp32, tf32 and 3xtf32 (one GEMM engine under all four, :mod:`fusedlib.engine`);
the peers run fp32 and tf32, tf32 through a scoped setting (:func:`peer_precision`), and
have no 3xtf32.

Outputs, next to each other (``results/<gpu>/`` unless ``--out`` names another CSV):
``bench.csv`` (:data:`COLUMNS`, a table's rows appended as soon as the table is timed), ``env.json``
(``--ceilings``: device, driver, clocks, measured copy bandwidth and cuBLAS GEMM rates,
datasheet values) and ``profile.csv`` (``--profile``: per-kernel device time from
torch.profiler, :data:`PROFILE_COLUMNS`; with ``--ncu`` also DRAM bytes and SM throughput
measured by Nsight Compute), and ``sources.json`` (the SHA-256 of the kernel sources the rows
were measured on, :func:`stamp_sources`). ``tflops`` and ``gbytes_per_s`` divide the cost model's FLOPs
and compulsory bytes (:mod:`fusedlib.costmodel`) by the median time.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import engine
from .costmodel import IMPLS, MODES, PRECISIONS
from .reference import PRESETS, PROBLEMS, Shape, parse_shape, problem_kind

#: The bench.csv contract, in order.
COLUMNS = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl", "median_ms",
           "min_ms", "max_ms", "iters", "tflops", "gbytes_per_s", "rel_err", "gpu", "torch", "cuda", "commit",
           "timestamp", "host_us"]
#: The profile.csv contract: torch.profiler's device time per kernel and call; the last two
#: columns are Nsight Compute's DRAM bytes per call and SM throughput (% of peak), empty
#: unless measured (``--ncu``).
PROFILE_COLUMNS = ["problem", "shape", "mode", "precision", "impl", "kernel", "calls", "cuda_time_us_per_call",
                   "dram_bytes_per_call", "sm_throughput_pct"]
STAGE_IMPLS, PEER_IMPLS = IMPLS[:4], IMPLS[4:]
COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune-no-cudagraphs"}
ROOT = Path(__file__).resolve().parent.parent
#: H100 SXM datasheet: HBM3 bandwidth (GB/s), dense FP32 and TF32 rates (TFLOP/s).
DATASHEET_H100 = {"device": "H100 SXM", "bandwidth_gbytes_per_s": 3350.0, "fp32_tflops": 67.0, "tf32_tflops": 495.0}
#: The method's minimums (docs/design.md §6) and the L2 flush size.
MIN_WARMUP, MIN_ITERS, FLUSH_MB = 10, 50, 256
#: Rounds in which the implementations of a table are timed in turn (``--rounds``).
ROUNDS = 5
#: Short calls get more timed calls (:func:`table_iters`): until each implementation's timed
#: calls add up to MIN_TIMED_MS (``--min-time-ms``), at most MAX_ITERS, in rounds of at
#: least CALLS_PER_ROUND calls.
MIN_TIMED_MS, MAX_ITERS, CALLS_PER_ROUND = 500.0, 1000, 10
#: Size sweeps: batch at BATCH_SWEEP_FEATURES→BATCH_SWEEP_FEATURES, and features (K = M) at
#: FEATURE_SWEEP_BATCH rows; the sizes are overridable (--batches, --features).
SWEEP_BATCHES = (256, 1024, 4096)
SWEEP_FEATURES = (1024, 2048, 4096, 8192)
BATCH_SWEEP_FEATURES, FEATURE_SWEEP_BATCH = 4096, 1024
NCU_METRICS = ("dram__bytes.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed")


# --------------------------------------------------------------------------- selection

def gpu_slug(name: str) -> str:
    """Results folder name of a device: ``h100`` if the name contains H100, ``h200`` for H200,
    ``a100`` for A100, else its lower-case letters and digits (``gpu`` if none)."""
    low = name.lower()
    for slug in ("h100", "h200", "a100"):
        if slug in low:
            return slug
    return "".join(ch for ch in low if ch.isalnum()) or "gpu"


def parse_list(text: str, choices, groups: dict | None = None, what: str = "value") -> list[str]:
    """Split a comma list, expand ``all`` and the named groups, keep the order of ``choices``.

    Raises:
        ValueError: an entry is neither a choice nor a group.
    """
    groups = {"all": tuple(choices), **(groups or {})}
    wanted: set[str] = set()
    for item in (t.strip() for t in str(text).split(",")):
        if not item:
            continue
        if item in groups:
            wanted.update(groups[item])
        elif item in choices:
            wanted.add(item)
        else:
            raise ValueError(f"{what}: expected a comma list of {list(choices)} or {sorted(groups)}, got {item!r}")
    return [c for c in choices if c in wanted]


def available(impl: str, precision: str) -> bool:
    """Whether ``impl`` runs at ``precision``: the four stages run every precision; the
    peers have fp32 and tf32 (PyTorch has no 3xTF32 mode)."""
    if impl in STAGE_IMPLS:
        return True
    return precision != "3xtf32"


@dataclass(frozen=True)
class Table:
    """Implementations timed together: one problem, shape, mode and precision."""

    problem: str
    shape: Shape
    mode: str
    precision: str
    impls: tuple[str, ...]


def sweep_shapes(kind: str, batches=SWEEP_BATCHES, features=SWEEP_FEATURES) -> list[Shape]:
    """Shapes of a size sweep: ``batch`` (N in ``batches`` at 4096→4096) or ``features``
    (K = M in ``features`` at batch 1024).

    Raises:
        ValueError: unknown sweep kind.
    """
    if kind == "batch":
        return [Shape(b, BATCH_SWEEP_FEATURES, BATCH_SWEEP_FEATURES) for b in batches]
    if kind == "features":
        return [Shape(FEATURE_SWEEP_BATCH, f, f) for f in features]
    raise ValueError(f"sweep: expected 'batch' or 'features', got {kind!r}")


def plan_tables(problems, shapes, modes, precisions, impls) -> list[Table]:
    """Every table to time, in order problem, shape, mode, precision.

    Args:
        problems: problem ids ("84", "33", "39").
        shapes: dict problem → list of :class:`Shape`.
        modes, precisions, impls: selections (see :func:`available` for what runs where).

    A table whose problem family ("84" or "33") and shape were already planned is skipped:
    problems 33 and 39 are the same model, so 39 at 33's shape would repeat 33's table.
    Tables left with no implementation are dropped.
    """
    seen, tables = set(), []
    for problem in problems:
        for shape in shapes[problem]:
            for mode in modes:
                for precision in precisions:
                    key = (problem_kind(problem), shape, mode, precision)
                    todo = tuple(i for i in impls if available(i, precision))
                    if key in seen or not todo:
                        continue
                    seen.add(key)
                    tables.append(Table(problem, shape, mode, precision, todo))
    return tables


# --------------------------------------------------------------------------- timing

#: The peers' scoped TF32 switch (the fused backward's GEMMs use the same one).
peer_precision = engine.cublas_precision


def _flush_buffer(x, flush_mb: int):
    """The L2 flush buffer of the timed calls on ``x``'s device: ``flush_mb`` MiB of float32
    on a CUDA device; None on the CPU or for ``flush_mb`` 0 (no flush)."""
    import torch
    if not x.is_cuda or not flush_mb:
        return None
    return torch.empty(flush_mb * (1 << 20) // 4, device=x.device, dtype=torch.float32)


def _timed_call(fn, x, flush) -> tuple[float, float]:
    """One timed call of ``fn(x)``, the protocol of :func:`time_cuda` and
    :func:`time_round_robin`: (time in ms, host time in µs). CUDA tensor: ``flush.zero_()``
    (the L2 flush, unless ``flush`` is None), a CUDA event before and after the call, a device
    synchronize; the host time is the host clock around the call alone: the CPU time to
    enqueue one forward (the GPU is still busy with the flush, so no launch waits for it).
    CPU tensor: the host clock around the call, for both."""
    import time

    import torch
    if not x.is_cuda:
        start = time.perf_counter()
        fn(x)
        ms = (time.perf_counter() - start) * 1e3
        return ms, ms * 1e3
    if flush is not None:
        flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    host = time.perf_counter()
    fn(x)
    host = time.perf_counter() - host
    end.record()
    torch.cuda.synchronize(x.device)
    return start.elapsed_time(end), host * 1e6


def _summary(times: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of a list of times (the median: the upper middle element)."""
    times = sorted(times)
    return times[len(times) // 2], times[0], times[-1]


def time_cuda(fn, x, warmup: int = MIN_WARMUP, iters: int = MIN_ITERS, flush_mb: int = FLUSH_MB
              ) -> tuple[float, float, float]:
    """Time ``fn(x)``: (median, min, max) in ms over ``iters`` calls.

    CUDA tensor: ``warmup`` untimed calls, then for each timed call a ``flush_mb`` MiB
    ``zero_()`` (L2 flush; 0 skips it), a CUDA event before and after the call and a device
    synchronize (KernelBench's timing loop). CPU tensor (a dry run of the harness): the host
    clock around each call, no flush. To time several implementations against each other,
    :func:`time_round_robin` interleaves them.

    Raises:
        ValueError: ``iters`` < 1.
    """
    import torch
    if iters < 1:
        raise ValueError(f"iters: expected >= 1, got {iters}")
    for _ in range(warmup):
        fn(x)
    flush = _flush_buffer(x, flush_mb)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    return _summary([_timed_call(fn, x, flush)[0] for _ in range(iters)])


class TimingError(RuntimeError):
    """A call of one implementation failed inside :func:`time_round_robin`; ``impl`` names it
    (the cause is chained), so that the caller can drop it and time the others."""

    def __init__(self, impl: str, exc: BaseException):
        super().__init__(f"{impl}: {type(exc).__name__}: {exc}")
        self.impl = impl


def round_calls(iters: int, rounds: int) -> list[int]:
    """Timed calls of one implementation in each round: ``iters // rounds``, one more in the
    first ``iters % rounds`` rounds (7 over 3 rounds: 3, 2, 2); they add up to ``iters``.

    Raises:
        ValueError: ``rounds`` < 1, or ``iters`` < ``rounds`` (a round without calls).
    """
    if rounds < 1:
        raise ValueError(f"rounds: expected >= 1, got {rounds}")
    if iters < rounds:
        raise ValueError(f"iters: expected >= rounds ({rounds}) so that every round times each "
                         f"implementation at least once, got {iters}")
    return [iters // rounds + (r < iters % rounds) for r in range(rounds)]


def _precision_context(precision):
    """A context manager factory: ``peer_precision(precision)`` for a string, the factory
    itself for a callable, no-op for None."""
    if precision is None:
        return contextlib.nullcontext
    if isinstance(precision, str):
        return lambda: peer_precision(precision)
    if callable(precision):
        return precision
    raise TypeError(f"precision: expected a precision string, a context manager factory or None, "
                    f"got {precision!r}")


def time_round_robin(fns: dict, x, warmup: int = MIN_WARMUP, iters: int = MIN_ITERS, rounds: int = ROUNDS,
                     flush_mb: int = FLUSH_MB) -> dict[str, tuple[float, float, float, float]]:
    """Time several implementations of one computation against each other, interleaved:
    impl → (median, min, max) in ms over ``iters`` calls each, and the median host time in µs
    (the CPU time to enqueue one call, :func:`_timed_call`).

    Args:
        fns: impl name → (callable, precision): a precision string (the calls run under
            :func:`peer_precision` of it), a context manager factory, or None. The impls are
            timed in this order.
        x: the input of every call.
        warmup: untimed calls of each impl, all before the first round.
        iters: timed calls of each impl, spread over the rounds (:func:`round_calls`).
        rounds: each round times every impl in turn, for its share of ``iters`` calls in a
            row; the impl's precision context is entered and left around each such block.
        flush_mb: the L2 flush before each timed call (0: none).

    Each timed call follows :func:`time_cuda`'s protocol (:func:`_timed_call`): on a CUDA
    tensor an L2 flush, CUDA events and a synchronize; on a CPU tensor the host clock, no
    flush. Timed one after the other, an implementation later in a table runs after the GPU's
    clocks and temperature have drifted (on the H100 an equal implementation looked 2-3 %
    slower there); in rounds, the drift falls on every implementation alike.

    Raises:
        ValueError: ``rounds`` < 1 or ``iters`` < ``rounds``.
        TimingError: a call of one impl raised (its ``impl`` attribute names it).
    """
    import torch
    counts = round_calls(iters, rounds)
    contexts = {name: _precision_context(precision) for name, (_, precision) in fns.items()}

    def calls(name, fn, n, timed, flush=None) -> list[float]:
        try:
            with contexts[name]():
                if timed:
                    return [_timed_call(fn, x, flush) for _ in range(n)]
                for _ in range(n):
                    fn(x)
                return []
        except Exception as exc:
            raise TimingError(name, exc) from exc

    for name, (fn, _) in fns.items():
        calls(name, fn, warmup, timed=False)
    flush = _flush_buffer(x, flush_mb)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    times = {name: [] for name in fns}
    for n in counts:
        for name, (fn, _) in fns.items():
            times[name] += calls(name, fn, n, timed=True, flush=flush)
    return {name: (*_summary([ms for ms, _ in t]), _summary([us for _, us in t])[0]) for name, t in times.items()}


def table_iters(fns: dict, x, iters: int, rounds: int, min_ms: float = MIN_TIMED_MS,
                max_iters: int = MAX_ITERS) -> tuple[int, int]:
    """(timed calls per implementation, rounds) for one table, like triton.testing.do_bench's
    ``rep``: at least ``iters``, and for short calls enough that the slowest implementation's
    timed calls add up to ``min_ms`` ms (at most ``max_iters``), so that a median of calls of
    a fraction of a millisecond is as steady as one of long calls; ``rounds`` at least
    ``rounds`` and one per :data:`CALLS_PER_ROUND` calls. The call time is the median of
    three timed calls of each implementation (:func:`_timed_call`, no flush); on the CPU
    (a dry run) ``(iters, rounds)`` as given.

    Args:
        fns: impl name → (callable, precision), as :func:`time_round_robin`.
        x: the input of every call.
        iters, rounds: the minimums (``--iters``, ``--rounds``).
        min_ms: timed milliseconds per implementation to reach (0: ``iters``).
        max_iters: the most timed calls.

    Raises:
        TimingError: a call of one impl raised (its ``impl`` attribute names it).
    """
    if not x.is_cuda or min_ms <= 0:
        return iters, rounds
    slowest = 0.0
    for name, (fn, precision) in fns.items():
        try:
            with _precision_context(precision)():
                slowest = max(slowest, _summary([_timed_call(fn, x, None)[0] for _ in range(3)])[0])
        except Exception as exc:
            raise TimingError(name, exc) from exc
    return iters_for(slowest, iters, rounds, min_ms, max_iters)


def iters_for(call_ms: float, iters: int, rounds: int, min_ms: float = MIN_TIMED_MS,
              max_iters: int = MAX_ITERS) -> tuple[int, int]:
    """(timed calls, rounds) of :func:`table_iters` for a slowest call of ``call_ms`` ms:
    n = max(iters, min(max_iters, ⌈min_ms / call_ms⌉)) (``iters`` for ``min_ms`` 0) and
    rounds = min(n, max(rounds, n // :data:`CALLS_PER_ROUND`))."""
    n = max(iters, min(max_iters, math.ceil(min_ms / max(call_ms, 1e-3)))) if min_ms > 0 else iters
    return n, min(n, max(rounds, n // CALLS_PER_ROUND))


def rel_err(y, y64) -> float:
    """Normwise relative error ‖y − y64‖_F / ‖y64‖_F in float64 (NaN if y has NaN/inf)."""
    import torch
    return (torch.linalg.vector_norm(y.double() - y64) / torch.linalg.vector_norm(y64)).item()


def build_impl(impl: str, ref, precision: str, reset: bool = True):
    """(callable, module whose state to reset or None) for one implementation, built from the
    reference model ``ref`` (its device, parameters and train/eval mode).

    Stages: :func:`fusedlib.from_reference`. eager: a copy of ``ref``. compile peers: a copy
    of ``ref`` under ``torch.compile(mode=..., dynamic=False)``, after ``torch._dynamo.reset()``
    (unless ``reset`` is False) so that each table compiles afresh (no recompile limit, no
    dynamic-shape reuse). The bench builds a table's two compile peers side by side, both
    kept for the round-robin: it resets once per table and passes ``reset=False``, since a
    reset between them would drop the first one's compiled code.
    gemm_only: ``F.linear`` with ``ref``'s weight and bias.
    """
    import torch

    from .modules import from_reference
    if impl in STAGE_IMPLS:
        module = from_reference(ref, stage=impl, precision=precision)
        return module, module
    if impl == "gemm_only":
        w, b = ref.gemm.weight, ref.gemm.bias
        return (lambda x: torch.nn.functional.linear(x, w, b)), None
    module = copy.deepcopy(ref)
    if impl == "eager":
        return module, module
    if reset:
        torch._dynamo.reset()
    return torch.compile(module, mode=COMPILE_MODES[impl], dynamic=False), module


# --------------------------------------------------------------------------- CSV

def _environment(device: str = "cuda") -> dict:
    """gpu (device name), torch, cuda (torch's CUDA version) and commit (the ``FUSEDLIB_COMMIT``
    environment variable when set — for copies of the tree whose ``.git`` is not the one the
    code was committed in, such as a remote GPU machine's —, else the short HEAD, else "unknown")."""
    import os
    import platform

    import torch
    try:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        commit = proc.stdout.strip() if proc.returncode == 0 else ""
    except OSError:
        commit = ""
    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu {platform.machine()}"
    return {"gpu": name, "torch": torch.__version__, "cuda": torch.version.cuda or "none",
            "commit": os.environ.get("FUSEDLIB_COMMIT") or commit or "unknown"}


def make_row(problem: str, shape: Shape, mode: str, precision: str, impl: str, times, iters: int,
             rel_error: float, env: dict) -> dict:
    """One bench.csv row (:data:`COLUMNS`). ``times`` = (median, min, max) in ms, optionally
    followed by the median host time per call in µs (``host_us``, empty without it); ``tflops``
    (TFLOP/s) and ``gbytes_per_s`` (GB/s) are the cost model's FLOPs and compulsory bytes of
    ``impl`` divided by the median; ``timestamp`` is ISO-8601 UTC."""
    from .costmodel import cost
    median, lo, hi, *host = times
    c = cost(problem_kind(problem), impl, shape.batch, shape.in_features, shape.out_features, mode, precision)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"problem": str(problem), "batch": shape.batch, "in_features": shape.in_features,
            "out_features": shape.out_features, "mode": mode, "precision": precision, "impl": impl,
            "median_ms": _sig(median), "min_ms": _sig(lo), "max_ms": _sig(hi), "iters": iters,
            "tflops": _sig(c.flops / (median * 1e-3) / 1e12), "gbytes_per_s": _sig(c.bytes / (median * 1e-3) / 1e9),
            "rel_err": _sig(rel_error, 3), "gpu": env["gpu"], "torch": env["torch"], "cuda": env["cuda"],
            "commit": env["commit"], "timestamp": now, "host_us": _sig(host[0], 4) if host else ""}


def _sig(value: float, digits: int = 6) -> float:
    """``value`` rounded to ``digits`` significant digits (keeps the CSV readable)."""
    return float(f"{value:.{digits}g}")


def stamp_sources(out: Path, name: str = "sources.json") -> Path:
    """Write ``name`` beside ``out`` (bench.csv; train_step.csv has its own record): the
    SHA-256 of every kernel source the rows are measured on
    (:func:`fusedlib.build.sources_sha256`), so that a test can tell when committed timings
    are stale. Returns its path.

    Raises:
        ValueError: ``out`` already holds rows measured on other kernel sources (or on
            sources not recorded): one bench.csv holds one version of the kernels.
    """
    from .build import sources_sha256, stale_sources
    path = out.parent / name
    if out.exists() and out.stat().st_size > 0:
        if not path.exists():
            raise ValueError(f"{out} has rows but no {path.name} beside it: the kernel sources they were measured "
                             "on are unknown; start a new file with --fresh")
        changed = stale_sources(json.loads(path.read_text())["sources_sha256"])
        if changed:
            raise ValueError(f"{out} was measured on other kernel sources (changed since: {', '.join(changed)}); "
                             "start a new file with --fresh")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sources_sha256": sources_sha256()}, indent=1) + "\n")
    return path


def check_header(path: Path, columns=COLUMNS) -> None:
    """Raise ValueError if ``path`` exists, is not empty and its header is not ``columns``."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    if header != list(columns):
        raise ValueError(f"{path}: has the columns {header}, expected {list(columns)}; "
                         "start a new file with --fresh or write elsewhere with --out")


def append_rows(path: Path, rows: list[dict], columns=COLUMNS) -> None:
    """Append rows to the CSV at ``path``, writing the header first if the file is new.

    Raises:
        ValueError: a row's keys are not exactly ``columns`` (in order), or the file's
        header differs (:func:`check_header`).
    """
    for row in rows:
        if list(row) != list(columns):
            raise ValueError(f"row: expected the columns {list(columns)}, got {list(row)}")
    check_header(path, columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def append_row(path: Path, row: dict) -> None:
    """Append one bench.csv row (:data:`COLUMNS`); see :func:`append_rows`."""
    append_rows(path, [row], COLUMNS)


# --------------------------------------------------------------------------- ceilings

def measure_ceilings(copy_mib: int = 1024, gemm: int = 8192) -> dict:
    """Device ceilings measured now, on the current CUDA device.

    Returns:
        ``copy_gbytes_per_s``: device-to-device copy of ``copy_mib`` MiB, bytes read +
        written per second (GB/s, median of 20); ``gemm_fp32_tflops`` and
        ``gemm_tf32_tflops``: cuBLAS ``torch.mm`` of two ``gemm``² fp32 matrices, 2·gemm³ FLOPs
        over the median of 10 (TFLOP/s), TF32 scoped by :func:`peer_precision`; and the
        sizes used.
    """
    import torch
    src = torch.rand(copy_mib * (1 << 20) // 4, device="cuda")
    dst = torch.empty_like(src)
    ms, _, _ = time_cuda(lambda s: dst.copy_(s), src, warmup=3, iters=20, flush_mb=0)
    out = {"copy_gbytes_per_s": 2 * src.numel() * 4 / (ms * 1e-3) / 1e9, "copy_bytes": src.numel() * 4}
    del src, dst
    a, b = torch.rand(gemm, gemm, device="cuda"), torch.rand(gemm, gemm, device="cuda")
    for precision in ("fp32", "tf32"):
        with peer_precision(precision):
            ms, _, _ = time_cuda(lambda x: torch.mm(x, b), a, warmup=3, iters=10, flush_mb=0)
        out[f"gemm_{precision}_tflops"] = 2 * gemm ** 3 / (ms * 1e-3) / 1e12
    out["gemm_size"] = gemm
    return out


def parse_nvidia_smi(text: str) -> dict:
    """Parse one line of ``nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.max.mem
    --format=csv,noheader`` (e.g. ``580.95.05, 1980 MHz, 2619 MHz``) into ``driver``,
    ``sm_clock_max_mhz`` and ``mem_clock_max_mhz`` (None where missing or unreadable)."""
    fields = [f.strip() for f in text.strip().split(",")] if text.strip() else []

    def mhz(i):
        try:
            return int(fields[i].split()[0])
        except (IndexError, ValueError):
            return None
    return {"driver": fields[0] if fields else None, "sm_clock_max_mhz": mhz(1), "mem_clock_max_mhz": mhz(2)}


def write_env(path: Path, ceilings: dict) -> dict:
    """Write ``env.json``: device name, capability, driver and max clocks (nvidia-smi, where
    available), torch, CUDA, commit, SM count, L2 and memory size (bytes), the measured
    ceilings (:func:`measure_ceilings`) and the H100 SXM datasheet values. Returns the dict."""
    import torch
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    smi = ""
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
                               "--format=csv,noheader", f"--id={index}"], capture_output=True, text=True)
        smi = proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
    env = {**_environment(), "capability": f"{props.major}.{props.minor}", **parse_nvidia_smi(smi),
           "sm_count": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
           "memory_bytes": props.total_memory, "measured": ceilings, "datasheet": DATASHEET_H100,
           "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env, indent=1) + "\n")
    return env


# --------------------------------------------------------------------------- profiles

def profile_kernels(fn, x, calls: int = 5, flush_mb: int = FLUSH_MB) -> list[tuple[str, int, float]]:
    """Device kernels of one call of ``fn(x)``: (kernel name, launches per call, device µs
    per call), from ``torch.profiler`` over ``calls`` calls, each after the same L2 flush as
    :func:`time_cuda`. The flush's own kernels are left out (found by profiling the flush
    alone; the models launch no fill kernels), and CPU-side operator entries are skipped
    so that no kernel is counted twice."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    flush = torch.empty(flush_mb * (1 << 20) // 4, device=x.device, dtype=torch.float32)

    def device_events(prof):
        for evt in prof.key_averages():
            if str(getattr(evt, "device_type", "")).endswith("CUDA") and evt.count:
                yield evt

    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        torch.cuda.synchronize()
    flush_names = {evt.key for evt in device_events(prof)}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn(x)
        torch.cuda.synchronize()
    rows = []
    for evt in device_events(prof):
        device_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if evt.key not in flush_names and device_us > 0:
            rows.append((evt.key, max(1, round(evt.count / calls)), device_us / calls))
    return rows


def kernel_base(name: str) -> str:
    """A kernel's bare function name, as both torch.profiler's demangled names and Nsight
    Compute's ``function`` names reduce to it: no return type, template arguments,
    parameter list or namespaces (``void fl::k<64>(fl::Problem)`` → ``k``)."""
    text = name.replace("(anonymous namespace)", "")
    depth, out = 0, []
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            if ch == "(":
                break
            out.append(ch)
    words = "".join(out).split()
    return words[-1].split("::")[-1] if words else name


def parse_ncu_csv(text: str) -> dict[str, dict]:
    """Per kernel base name (:func:`kernel_base`): ``dram_bytes`` summed over its launches
    and ``sm_throughput_pct`` averaged, from Nsight Compute's ``--csv --print-units base``
    output (a header with "ID", "Kernel Name", "Metric Name", "Metric Value"; lines before
    it, such as ``==PROF==`` messages, are skipped; thousands separators are removed)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') and "Metric Name" in line), None)
    if start is None:
        return {}
    per_kernel: dict[str, dict] = {}
    for rec in csv.DictReader(lines[start:]):
        try:
            value = float(rec["Metric Value"].replace(",", ""))
        except (KeyError, ValueError, AttributeError):
            continue
        entry = per_kernel.setdefault(kernel_base(rec.get("Kernel Name", "")), {"dram_bytes": 0.0, "sm": []})
        if rec.get("Metric Name") == NCU_METRICS[0]:
            entry["dram_bytes"] += value
        elif rec.get("Metric Name") == NCU_METRICS[1]:
            entry["sm"].append(value)
    return {k: {"dram_bytes": v["dram_bytes"], "sm_throughput_pct": sum(v["sm"]) / len(v["sm"]) if v["sm"] else None}
            for k, v in per_kernel.items()}


def profile_rows(table: Table, impl: str, kernels, ncu: dict | None = None) -> list[dict]:
    """profile.csv rows (:data:`PROFILE_COLUMNS`) of one implementation. Nsight Compute's
    numbers (``ncu``, from :func:`parse_ncu_csv`) go to the first kernel with the same base
    name; the ncu columns stay empty elsewhere."""
    used, rows = set(), []
    for name, calls, us in kernels:
        base = kernel_base(name)
        hit = (ncu or {}).get(base) if base not in used else None
        used.add(base)
        rows.append({"problem": table.problem, "shape": str(table.shape), "mode": table.mode,
                     "precision": table.precision, "impl": impl, "kernel": name, "calls": calls,
                     "cuda_time_us_per_call": round(us, 3),
                     "dram_bytes_per_call": "" if hit is None else round(hit["dram_bytes"]),
                     "sm_throughput_pct": "" if hit is None or hit["sm_throughput_pct"] is None
                     else round(hit["sm_throughput_pct"], 1)})
    return rows


def ncu_command(ncu: str, log: Path, table: Table, impl: str, seed: int = 0) -> list[str]:
    """Nsight Compute command that profiles one call of ``impl`` (:func:`_ncu_target`):
    clocks left alone (``--clock-control none``), profiling only between
    cudaProfilerStart/Stop, the two metrics of :data:`NCU_METRICS`, CSV in base units."""
    code = (f"from fusedlib.bench import _ncu_target; _ncu_target({table.problem!r}, {str(table.shape)!r}, "
            f"{table.mode!r}, {table.precision!r}, {impl!r}, {seed})")
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS),
            "--csv", "--print-units", "base", "--log-file", str(log), sys.executable, "-c", code]


def run_ncu(table: Table, impl: str, seed: int = 0, timeout_s: int = 600) -> dict:
    """Run :func:`ncu_command` in a child process; returns :func:`parse_ncu_csv`'s dict.

    Raises:
        RuntimeError: ncu is not on PATH, failed, or timed out (message holds its output's end).
    """
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        try:
            proc = subprocess.run(ncu_command(ncu, log, table, impl, seed), capture_output=True, text=True,
                                  cwd=ROOT, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"ncu timed out after {timeout_s} s") from exc
        text = log.read_text() if log.exists() else ""
    result = parse_ncu_csv(text)
    if proc.returncode != 0 or not result:
        tail = (text + proc.stdout + proc.stderr)[-1500:]
        raise RuntimeError(f"ncu returned {proc.returncode} with no metrics:\n{tail}")
    return result


def _ncu_target(problem: str, shape: str, mode: str, precision: str, impl: str, seed: int = 0) -> None:
    """The child process of :func:`run_ncu`: build ``impl`` as the benchmark does, warm it up
    (build, compile, caches), then run one call between cudaProfilerStart and Stop."""
    import torch

    from .reference import make_reference
    s = parse_shape(shape)
    ref = make_reference(problem, s.in_features, s.out_features, seed=seed).cuda().train(mode == "train")
    x = bench_input(s, seed).cuda()
    fn, _ = build_impl(impl, ref, precision)
    with peer_precision(precision if impl in PEER_IMPLS else "fp32"), torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fn(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


# --------------------------------------------------------------------------- the run

def estimate_seconds(tables: list[Table], warmup: int, iters: int, profile: bool,
                     min_ms: float = MIN_TIMED_MS) -> float:
    """Rough wall time of a run on an H100 (s): each timed call at the cost model's roofs
    (GEMM rates in TFLOP/s: this project's engine, the same for every stage, 20 at fp32 on
    the SIMT path, 300 at tf32 and 100 at 3xtf32 on tensor cores; cuBLAS 50 at fp32 and
    330 at tf32 for the peers; 2.5 TB/s) plus 0.15 ms of flush and launch; 10 s per
    torch.compile, 30 s more per max-autotune of a new GEMM shape and precision; 1.5 s per
    profiled implementation; 60 s to build the kernels on a fresh machine; 10 s start-up.
    Timed calls per table as :func:`table_iters` would pick them from these call times. The round-robin (``--rounds``) changes the order of the calls, not their number, so the
    estimate does not depend on it."""
    from .costmodel import cost
    rates = {("stage", "fp32"): 20.0, ("stage", "tf32"): 300.0, ("stage", "3xtf32"): 100.0,
             ("peer", "fp32"): 50.0, ("peer", "tf32"): 330.0}
    total = 10.0 + (60.0 if any(i in STAGE_IMPLS for t in tables for i in t.impls) else 0.0)
    tuned = set()
    for t in tables:
        s = t.shape
        total += 2 * s.batch * s.in_features * s.out_features / 40e12 + 1.0  # float64 reference, set-up
        call_ms = {}
        for impl in t.impls:
            group = "stage" if impl in STAGE_IMPLS else "peer"
            c = cost(problem_kind(t.problem), impl, s.batch, s.in_features, s.out_features, t.mode, t.precision)
            call_ms[impl] = c.time_ms(rates[group, t.precision], 2500.0) + 0.15
        n = iters_for(max(call_ms.values()), iters, 1, min_ms)[0]
        for impl in t.impls:
            calls = warmup + n + 4 + (6 if profile else 0)
            total += calls * call_ms[impl] / 1e3 + (1.5 if profile else 0.0)
            if impl in COMPILE_MODES:
                total += 10.0
                key = (s, t.precision)
                if impl == "compile_max_autotune" and key not in tuned:
                    tuned.add(key)
                    total += 30.0
    return total


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", default="all", help="comma list of 84, 33, 39, or all (default)")
    p.add_argument("--shape", action="append", metavar="SHAPE",
                   help="preset (84, 33, 39, v0) or NxK->M; repeatable. Default: each problem's "
                        "KernelBench shape and v0 (unless --sweep is given)")
    p.add_argument("--sweep", action="append", choices=("batch", "features"),
                   help="size sweep (repeatable): batch N at 4096->4096, or features K = M at batch 1024")
    p.add_argument("--batches", default=",".join(map(str, SWEEP_BATCHES)), help="batch sizes of --sweep batch")
    p.add_argument("--features", default=",".join(map(str, SWEEP_FEATURES)), help="K = M of --sweep features")
    p.add_argument("--mode", default="all", help="train, eval or all (default; comma list)")
    p.add_argument("--precision", default="all", help="fp32, tf32, 3xtf32 or all (default; comma list)")
    p.add_argument("--stage", help="stages to time: comma list of naive, fold, sums, fused, or all")
    p.add_argument("--impl", help="implementations: comma list of stages and peers "
                   f"({', '.join(IMPLS)}) or the groups all, stages, peers. Default (neither "
                   "--stage nor --impl): all; with both, their union")
    p.add_argument("--iters", type=int, default=MIN_ITERS, help=f"timed calls (method: >= {MIN_ITERS})")
    p.add_argument("--min-time-ms", type=float, default=MIN_TIMED_MS,
                   help=f"more timed calls for short calls: until each implementation's add up to this many "
                        f"ms, at most {MAX_ITERS} (default {MIN_TIMED_MS:g}; 0: exactly --iters)")
    p.add_argument("--warmup", type=int, default=MIN_WARMUP, help=f"untimed calls first (method: >= {MIN_WARMUP})")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help=f"the implementations of a table are timed in turn, in this many rounds of about "
                        f"iters/rounds calls each, so that GPU clock drift falls on all alike (default "
                        f"{ROUNDS}; >= 1 and at most --iters)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model parameters and inputs")
    p.add_argument("--out", type=Path, help="bench.csv to write (default results/<gpu>/bench.csv); "
                   "env.json, profile.csv and sources.json go next to it")
    p.set_defaults(fresh=False)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--append", dest="fresh", action="store_false", help="append to existing CSVs (default)")
    group.add_argument("--fresh", action="store_true", help="start new bench.csv (and profile.csv with --profile)")
    p.add_argument("--ceilings", action="store_true", help="measure copy bandwidth and cuBLAS GEMM rates into env.json")
    p.add_argument("--profile", action="store_true", help="per-kernel device times (torch.profiler) into profile.csv")
    p.add_argument("--profile-only", action="store_true", help="with --profile: profile without timing (no bench.csv rows)")
    p.add_argument("--ncu", action="store_true", help="with --profile, if ncu is on PATH: DRAM bytes and SM "
                   "throughput per kernel from Nsight Compute (one child process per implementation: slow)")
    p.add_argument("--list", action="store_true", help="print the tables and an estimated run time, run nothing")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a dry run of the harness on the stage algebra (host clock; needs --out)")


def _selection(args) -> tuple[list[str], dict, list[str], list[str], list[str]]:
    """Problems, shapes per problem, modes, precisions and implementations from the options.

    Raises:
        ValueError: an unknown name or size.
    """
    problems = parse_list(args.problem, tuple(PROBLEMS), what="problem")
    modes = parse_list(args.mode, MODES, what="mode")
    precisions = parse_list(args.precision, PRECISIONS, what="precision")
    if args.stage is None and args.impl is None:
        impls = list(IMPLS)
    else:
        chosen = set(parse_list(args.stage, STAGE_IMPLS, what="stage")) if args.stage else set()
        if args.impl:
            chosen |= set(parse_list(args.impl, IMPLS, {"stages": STAGE_IMPLS, "peers": PEER_IMPLS}, what="impl"))
        impls = [i for i in IMPLS if i in chosen]
    try:
        batches = [int(v) for v in args.batches.split(",") if v.strip()]
        features = [int(v) for v in args.features.split(",") if v.strip()]
    except ValueError as exc:
        raise ValueError(f"--batches/--features: expected comma lists of integers ({exc})") from None
    shapes = {}
    for problem in problems:
        listed = [parse_shape(s) for s in (args.shape or [])]
        if not args.shape and not args.sweep:
            listed = [PRESETS[problem], PRESETS["v0"]]
        for sweep in args.sweep or []:
            listed += sweep_shapes(sweep, batches, features)
        shapes[problem] = list(dict.fromkeys(listed))
    return problems, shapes, modes, precisions, impls


def main(args) -> int:
    try:
        tables = plan_tables(*_selection(args))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.iters < args.rounds:
        print(f"error: --rounds {args.rounds} --iters {args.iters}: expected 1 <= --rounds <= --iters "
              f"(every round times each implementation at least once; --rounds defaults to {ROUNDS})",
              file=sys.stderr)
        return 2
    if args.list:
        for t in tables:
            print(f"{t.problem:>3} {str(t.shape):>18} {t.mode:5} {t.precision:6} {','.join(t.impls)}")
        n = sum(len(t.impls) for t in tables)
        est = estimate_seconds(tables, args.warmup, args.iters, args.profile, args.min_time_ms)
        print(f"{len(tables)} tables, {n} measurements, about {est / 60:.1f} min on an H100")
        return 0
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: bench needs a CUDA device (or --device cpu --out FILE for a dry run)", file=sys.stderr)
        return 2
    if args.device == "cpu" and (args.out is None or args.ceilings or args.profile):
        print("error: --device cpu is a dry run: give --out, and no --ceilings or --profile", file=sys.stderr)
        return 2
    if (args.profile_only or args.ncu) and not args.profile:
        print("error: --profile-only and --ncu go with --profile", file=sys.stderr)
        return 2
    if args.device == "cuda" and (args.warmup < MIN_WARMUP or args.iters < MIN_ITERS):
        print(f"warning: --warmup {args.warmup} --iters {args.iters} is below the method's "
              f"{MIN_WARMUP} warm-ups and {MIN_ITERS} timed calls", file=sys.stderr)
    env = _environment(args.device)
    out = args.out or ROOT / "results" / gpu_slug(env["gpu"]) / "bench.csv"
    profile_csv = out.parent / "profile.csv"
    if args.fresh:
        for path in [out] + ([profile_csv] if args.profile else []):
            path.unlink(missing_ok=True)
    try:
        check_header(out, COLUMNS)
        check_header(profile_csv, PROFILE_COLUMNS)
        stamp_sources(out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.ncu and shutil.which("ncu") is None:
        print("warning: ncu is not on PATH: profile.csv gets no Nsight Compute columns", file=sys.stderr)
        args.ncu = False
    if args.ceilings:
        env_json = write_env(out.parent / "env.json", measure_ceilings())
        m = env_json["measured"]
        print(f"ceilings: copy {m['copy_gbytes_per_s']:.0f} GB/s, cuBLAS fp32 {m['gemm_fp32_tflops']:.1f} "
              f"and tf32 {m['gemm_tf32_tflops']:.1f} TFLOP/s -> {out.parent / 'env.json'}", file=sys.stderr)
    if args.device == "cuda":
        broken = _prebuild({i for t in tables for i in t.impls if i in STAGE_IMPLS})
        tables = [Table(t.problem, t.shape, t.mode, t.precision, tuple(i for i in t.impls if i not in broken))
                  for t in tables]
    failures = _run(tables, args, env, out, profile_csv)
    print(f"wrote {out}" + (f" and {profile_csv}" if args.profile else "") +
          (f"; {failures} measurement(s) failed (see the warnings)" if failures else ""))
    return 0


def _prebuild(stages) -> set[str]:
    """Build the stages' kernels in parallel child processes (each stage is one nvcc
    build, about 40 s; minutes when done one after another); the run then loads them from
    the cache. Returns the stages whose build failed (reported here)."""
    if not stages:
        return set()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    procs = {s: subprocess.Popen([sys.executable, "-c", f"from fusedlib.build import load_stage; load_stage({s!r})"],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for s in sorted(stages)}
    failed = set()
    for stage, proc in procs.items():
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failed.add(stage)
            print(f"warning: building the {stage} kernels failed; its rows are skipped:\n{output[-1500:]}",
                  file=sys.stderr)
    return failed


def bench_input(shape, seed: int = 0):
    """The timed input X (N, K) float32 on the CPU: KernelBench's ``torch.rand`` (``torch.randn``
    at v0), drawn from a generator seeded ``1000 + seed`` — a stream of its own, as in
    :func:`fusedlib.check.case_model`. (Drawn from the stream that initialised the parameters,
    ``torch.manual_seed(seed)``, row i of X would be an affine function of row i of W: the
    diagonal of X Wᵀ then stands out by ~25 standard deviations and problem 84's softmax
    rows collapse onto one column each, which hides every error.)"""
    import torch

    from .reference import get_inputs
    return get_inputs(shape, "randn" if shape == PRESETS["v0"] else "rand", torch.Generator().manual_seed(1000 + seed))


def _run(tables: list[Table], args, env: dict, out: Path, profile_csv: Path) -> int:
    """Time every table (:func:`_time_table`), appending each row as soon as its table is
    measured; returns the number of failed measurements (each reported as a warning)."""
    import gc

    import torch
    from tqdm import tqdm

    from .reference import make_reference
    failures = 0
    ref = state0 = x = y64 = z64 = None
    ref_key = x_key = y_key = None
    # On a terminal the bar redraws every second; in a log file every 30 s, to keep it short.
    bar = tqdm(total=sum(len(t.impls) for t in tables), desc="bench", unit="impl", file=sys.stderr,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    for table in tables:
        shape, problem = table.shape, table.problem
        if ref_key != (problem, shape):
            ref = y64 = z64 = None
            gc.collect()
            ref = make_reference(problem, shape.in_features, shape.out_features, seed=args.seed).to(args.device)
            state0 = {k: v.clone() for k, v in ref.state_dict().items()}
            ref_key = (problem, shape)
        if x_key != shape:
            x = bench_input(shape, args.seed).to(args.device)
            x_key = shape
        ref.load_state_dict(state0)
        ref.train(table.mode == "train")
        if y_key != (problem, shape, table.mode):
            y64 = z64 = None
            with torch.no_grad():
                ref64 = copy.deepcopy(ref).double()
                x64 = x.double()
                y64 = ref64(x64)
                z64 = torch.nn.functional.linear(x64, ref64.gemm.weight, ref64.gemm.bias)
                del ref64, x64
            y_key = (problem, shape, table.mode)
        failures += _time_table(table, ref, state0, x, y64, z64, args, env, out, profile_csv, bar)
        if any(i in COMPILE_MODES for i in table.impls):
            torch._dynamo.reset()  # let go of the table's compiled graphs
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    bar.close()
    return failures


def _time_table(table: Table, ref, state0: dict, x, y64, z64, args, env: dict, out: Path, profile_csv: Path,
                bar) -> int:
    """One table: (1) build every implementation and make its error call (module state reset
    to ``state0`` first; the reference is ``z64`` for gemm_only, ``y64`` otherwise); (2) time
    the ones that passed (1) together, :func:`time_round_robin` in ``args.rounds`` rounds;
    (3) append their rows in the table's order; (4) with ``--profile``, profile each in turn.
    Peers run under :func:`peer_precision` at the table's precision, stages at "fp32". An
    implementation that fails is warned about and skipped, the others go on; returns the
    number of failures."""
    import torch
    from tqdm import tqdm

    def warn(impl, exc, what="failed"):
        cause = exc.__cause__ if isinstance(exc, TimingError) and exc.__cause__ is not None else exc
        tqdm.write(f"warning: {impl} at {table.problem} {table.shape} {table.mode} {table.precision} {what}: "
                   f"{type(cause).__name__}: {str(cause)[:800]}", file=sys.stderr)

    where = f"{table.problem} {table.shape} {table.mode} {table.precision}"
    failures, built, errors = 0, {}, {}
    if any(i in COMPILE_MODES for i in table.impls):
        torch._dynamo.reset()  # the table's compile peers compile afresh (build_impl(reset=False) below)
    for impl in table.impls:   # (1) build, error call
        bar.set_postfix_str(f"{where} {impl}: build", refresh=False)
        precision = table.precision if impl in PEER_IMPLS else "fp32"
        try:
            fn, module = build_impl(impl, ref, table.precision, reset=False)
            with peer_precision(precision), torch.no_grad():
                if module is not None:
                    module.load_state_dict(state0)  # every implementation's error call starts from one state
                errors[impl] = rel_err(fn(x), z64 if impl == "gemm_only" else y64)
            built[impl] = (fn, precision)
        except Exception as exc:  # e.g. a torch.compile failure: warn, skip the row, go on
            failures += 1
            warn(impl, exc)
            bar.update(1)
    if not args.profile_only:  # (2) time round-robin, (3) rows
        times = {}
        while built:
            bar.set_postfix_str(f"{where}: {len(built)} impls round-robin", refresh=False)
            try:
                with torch.no_grad():
                    iters, rounds = table_iters(built, x, args.iters, args.rounds, args.min_time_ms)
                    times = time_round_robin(built, x, args.warmup, iters, rounds)
                break
            except TimingError as exc:  # drop the failing implementation, time the others again
                failures += 1
                warn(exc.impl, exc, "failed while timed")
                del built[exc.impl]
                bar.update(1)
            except Exception as exc:  # not one implementation's call: the table's timing failed
                failures += len(built)
                for impl in built:
                    warn(impl, exc, "not timed")
                bar.update(len(built))
                built = {}
        for impl in built:
            append_row(out, make_row(table.problem, table.shape, table.mode, table.precision, impl, times[impl],
                                     iters, errors[impl], env))
    for impl, (fn, precision) in built.items():  # (4) profiles
        if args.profile:
            bar.set_postfix_str(f"{where} {impl}: profile", refresh=False)
            try:
                ncu = None
                if args.ncu:
                    try:
                        ncu = run_ncu(table, impl, args.seed)
                    except RuntimeError as exc:
                        tqdm.write(f"warning: ncu for {impl} at {table.problem} {table.shape}: {exc}",
                                   file=sys.stderr)
                with peer_precision(precision), torch.no_grad():
                    kernels = profile_kernels(fn, x)
                append_rows(profile_csv, profile_rows(table, impl, kernels, ncu), PROFILE_COLUMNS)
            except Exception as exc:
                failures += 1
                warn(impl, exc, "profile failed")
        bar.update(1)
    return failures
