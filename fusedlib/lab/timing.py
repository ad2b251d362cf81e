"""Timing protocol of the benchmark (docs/design.md §6): one timed call, a summary, and the
interleaved round-robin that times the implementations of a table against each other.

The protocol is that of KernelBench's timing loop and of ``triton.testing.do_bench``
(an L2 flush before each timed call, a pair of CUDA events, a device synchronize after it;
the number of calls raised for short calls until the timed time adds up to a floor,
:func:`table_iters`); the interleaving in rounds (:func:`time_round_robin`) is this
project's own: timed one after the other, an implementation late in a table ran after the
GPU's clocks had drifted. On CPU tensors (a dry run of the harness) the host clock times
each call. Units: milliseconds for device times, microseconds for host times.
"""
from __future__ import annotations

import contextlib
import functools
import math

from ..engine import cublas_precision

#: The method's minimums (docs/design.md §6) and the L2 flush size (MiB).
MIN_WARMUP, MIN_ITERS, FLUSH_MB = 10, 50, 256
#: Rounds in which the implementations of a table are timed in turn (``--rounds``).
ROUNDS = 5
#: Short calls get more timed calls (:func:`table_iters`): until each implementation's timed
#: calls add up to MIN_TIMED_MS (``--min-time-ms``), at most MAX_ITERS, in rounds of at
#: least CALLS_PER_ROUND calls.
MIN_TIMED_MS, MAX_ITERS, CALLS_PER_ROUND = 500.0, 1000, 10


#: The peers' scoped TF32 switch (the fused backward's GEMMs use the same one).
peer_precision = cublas_precision


def _flush_buffer(x, flush_mb: int):
    """The L2 flush buffer of the timed calls on ``x``'s device: ``flush_mb`` MiB of float32
    on a CUDA device; None on the CPU or for ``flush_mb`` 0 (no flush)."""
    import torch
    if not x.is_cuda or not flush_mb:
        return None
    return torch.empty(flush_mb * (1 << 20) // 4, device=x.device, dtype=torch.float32)


@functools.lru_cache(maxsize=None)
def _cycles_per_us(device) -> float:
    """The clock of ``torch.cuda._sleep``'s spin on ``device``: cycles per µs, from one spin of
    10⁷ cycles timed with CUDA events (a few ms, once per device)."""
    import torch
    with torch.cuda.device(device):
        torch.cuda._sleep(1000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def hold_cycles(x, hold_us: float) -> int:
    """The spin, in cycles, that holds ``x``'s CUDA stream for ``hold_us`` µs before a timed
    call (:func:`_timed_call`); 0 for ``hold_us`` 0 or a CPU tensor.

    Raises:
        ValueError: ``hold_us`` < 0.
    """
    if hold_us < 0:
        raise ValueError(f"hold_us: expected >= 0 µs, got {hold_us}")
    if not hold_us or not x.is_cuda:
        return 0
    return int(hold_us * _cycles_per_us(x.device))


def _timed_call(fn, x, flush, hold: int = 0) -> tuple[float, float]:
    """One timed call of ``fn(x)``, the protocol of :func:`time_cuda` and
    :func:`time_round_robin`: (time in ms, host time in µs). CUDA tensor: ``flush.zero_()``
    (the L2 flush, unless ``flush`` is None), a CUDA event before and after the call, a device
    synchronize; the host time is the host clock around the call alone: the CPU time to
    enqueue one forward (the GPU is still busy with the flush, so no launch waits for it).
    With ``hold`` (cycles, :func:`hold_cycles`) a spinning kernel (``torch.cuda._sleep``) runs
    between the flush and the start event, so that the host has enqueued the whole call before
    its first kernel can start: the time is then the GPU's alone, without its waits for the host
    (nvbench's blocking kernel, the same idea); the host time is then that of launches onto a
    busy stream, which cost the driver more, and is not the same quantity.
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
    if hold:
        torch.cuda._sleep(hold)
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
                     flush_mb: int = FLUSH_MB, hold_us: float = 0.0
                     ) -> dict[str, tuple[float, float, float, float, float | None]]:
    """Time several implementations of one computation against each other, interleaved:
    impl → (median, min, max) in ms over ``iters`` calls each, the median host time in µs
    (the CPU time to enqueue one call, :func:`_timed_call`), and with ``hold_us`` the median
    device time in ms (else None).

    Args:
        fns: impl name → (callable, precision): a precision string (the calls run under
            :func:`peer_precision` of it), a context manager factory, or None. The impls are
            timed in this order.
        x: the input of every call.
        warmup: untimed calls of each impl, all before the first round.
        iters: timed calls of each impl, spread over the rounds (:func:`round_calls`).
        rounds: each round times every impl in turn, for its share of ``iters`` calls in a
            row; the impl's precision context is entered and left around each such block.
            Round r starts at the r-th impl (the order rotated by one a round), so that over
            the rounds each impl takes each place in the round alike.
        flush_mb: the L2 flush before each timed call (0: none).
        hold_us: 0 (the default), or after each block of an impl's timed calls as many again,
            each with the stream held for ``hold_us`` µs before it (:func:`_timed_call`): their
            median is the device's time alone, without its waits for the host. ``hold_us`` must
            exceed the host's time to enqueue a call (``host_us``).

    Each timed call follows :func:`time_cuda`'s protocol (:func:`_timed_call`): on a CUDA
    tensor an L2 flush, CUDA events and a synchronize; on a CPU tensor the host clock, no
    flush. Timed one after the other, an implementation later in a table runs after the GPU's
    clocks and temperature have drifted (on the H100 an equal implementation looked 2-3 %
    slower there); in rounds, the drift falls on every implementation alike. The order within a
    round is rotated, so that each implementation takes each place in the round (first,
    second, …) alike: at its power limit a GPU's clock depends on what ran just before.

    Raises:
        ValueError: ``rounds`` < 1 or ``iters`` < ``rounds``.
        TimingError: a call of one impl raised (its ``impl`` attribute names it).
    """
    import torch
    counts = round_calls(iters, rounds)
    contexts = {name: _precision_context(precision) for name, (_, precision) in fns.items()}

    def calls(name, fn, n, timed, flush=None) -> tuple[list, list]:
        try:
            with contexts[name]():
                if timed:
                    return ([_timed_call(fn, x, flush) for _ in range(n)],
                            [_timed_call(fn, x, flush, hold)[0] for _ in range(n if hold else 0)])
                for _ in range(n):
                    fn(x)
                return [], []
        except Exception as exc:
            raise TimingError(name, exc) from exc

    hold = hold_cycles(x, hold_us)
    for name, (fn, _) in fns.items():
        calls(name, fn, warmup, timed=False)
    flush = _flush_buffer(x, flush_mb)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    times, held = {name: [] for name in fns}, {name: [] for name in fns}
    names = list(fns)
    for r, n in enumerate(counts):
        for name in names[r % len(names):] + names[:r % len(names)]:  # round r starts at impl r
            plain, device = calls(name, fns[name][0], n, timed=True, flush=flush)
            times[name] += plain
            held[name] += device
    return {name: (*_summary([ms for ms, _ in t]), _summary([us for _, us in t])[0],
                   _summary(held[name])[0] if held[name] else None) for name, t in times.items()}


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
