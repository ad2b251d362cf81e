"""``python -m fusedlib train-step``: time a training step (forward + backward, no optimizer)
of every stage and precision beside eager PyTorch and torch.compile, into
``results/<gpu>/train_step.csv``.

One table per problem (its KernelBench shape, train mode) and precision; the model is the
KernelBench one, so x is the input data (it needs no gradient: neither PyTorch nor the
fused backward computes dX) and dY a fixed ``randn``. Each implementation's step sets the
parameters' gradients to None, runs the forward and ``backward(dY)``. Timing: the bench's
method (:func:`fusedlib.lab.bench.time_round_robin`: L2 flush, CUDA events, rounds). Beside
the time, each row has the forward alone (ms, same method, grad enabled as in the step),
the peak memory the step allocates above what was allocated before it (MiB: saved
activations, gradients, workspaces) and the largest normwise relative error among the
parameters' gradients against a float64 copy of the reference (the bias's excluded: zero
in exact arithmetic, in train mode).

Precisions (:data:`PRECISIONS`; ``--precision``, the bench's names and groups: ``all`` is fp32,
tf32, 3xtf32, ``16bit`` bf16, fp16): fp32, tf32 and 3xtf32 as the bench (the stages' GEMM
precision; the peers' TF32 switch); bf16 and fp16 the module, x and dY in that dtype
(:func:`fusedlib.lab.bench.build_impl`: the stages at the GEMM precision
:func:`fusedlib.kernelbench.gemm_precision` gives the dtype, tf32), the gradients in it too,
against the float64 copy of the 16-bit model (parameters, x and dY rounded to the dtype: the
error is the step's own); ``autocast-bf16`` the float32 module with every call of the step
and of the forward under ``torch.autocast("cuda", dtype=torch.bfloat16)`` (the stages built at
the same GEMM precision, tf32; the peers with TF32 off: the Linear runs in bf16 anyway), x
and dY in float32, its gradients (float32) against the float32 model's float64 copy, so that
its error includes autocast's rounding of x, W and b.

Columns (:data:`COLUMNS`): problem, batch, in_features, out_features, precision, impl,
median_ms, min_ms, max_ms, iters, forward_ms, peak_mib, grad_rel_err, gpu, torch, cuda,
commit, timestamp, device_ms (the step's median with the stream held while the host enqueues:
``--hold-us``; empty without it). The kernel sources the rows were measured on are recorded beside, in
``train_step.sources.json`` (:func:`fusedlib.lab.bench.stamp_sources`): ``--fresh`` starts a
new file.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import sys
from pathlib import Path

from . import bench, records
from ..reference import PRESETS, PROBLEMS

COLUMNS = ["problem", "batch", "in_features", "out_features", "precision", "impl", "median_ms", "min_ms", "max_ms",
           "iters", "forward_ms", "peak_mib", "grad_rel_err", "gpu", "torch", "cuda", "commit", "timestamp",
           "device_ms"]
#: Implementations: the four stages, eager PyTorch and torch.compile (default mode).
IMPLS = ("naive", "fold", "sums", "fused", "eager", "compile")
#: The record of the kernel sources the rows were measured on, beside the CSV.
SOURCES = "train_step.sources.json"
#: Parameters whose gradients enter ``grad_rel_err``.
GRAD_PARAMS = ("gemm.weight", "scale", "bn.weight", "bn.bias")
#: The autocast precisions: label → the autocast dtype's name (the module stays float32).
AUTOCAST = {"autocast-bf16": "bf16"}
#: Every precision of a train-step row: the bench's (fp32, tf32, 3xtf32, bf16, fp16), then the
#: float32 module under autocast.
PRECISIONS = bench.ALL_PRECISIONS + tuple(AUTOCAST)


def parse_precisions(text: str) -> list[str]:
    """``--precision``: a comma list of :data:`PRECISIONS` and the bench's groups (``all``:
    fp32, tf32, 3xtf32; ``16bit``: bf16, fp16).

    Raises:
        ValueError: an entry is neither a precision nor a group.
    """
    return bench.parse_list(text, PRECISIONS, bench.PRECISION_GROUPS, what="precision")


def step_dtype(precision: str):
    """The dtype of the module, x and dY at ``precision``: float32 under autocast, else the
    bench's (:func:`fusedlib.lab.bench.table_dtype`)."""
    import torch
    return torch.float32 if precision in AUTOCAST else bench.table_dtype(precision)


def build_precision(precision: str) -> str:
    """The bench precision the implementations are built at (:func:`fusedlib.lab.bench.build_impl`):
    ``precision`` itself, and for an autocast precision the GEMM precision of the stages at its
    dtype (:func:`fusedlib.lab.costmodel.stage_precision`: tf32), with float32 modules."""
    from .costmodel import stage_precision
    return stage_precision(AUTOCAST[precision]) if precision in AUTOCAST else precision


def step_context(precision: str, impl: str):
    """A context manager factory for ``impl``'s calls at ``precision``
    (:func:`fusedlib.lab.bench.time_round_robin` enters it around each round): the peers'
    scoped TF32 switch at the table's precision (the stages': "fp32"), and for an autocast
    precision TF32 off inside ``torch.autocast("cuda", dtype)``."""
    import torch
    if precision not in AUTOCAST:
        flags = precision if impl in bench.PEER_IMPLS else "fp32"
        return lambda: bench.peer_precision(flags)
    dtype = bench.table_dtype(AUTOCAST[precision])

    @contextlib.contextmanager
    def context():
        with bench.peer_precision("fp32"), torch.autocast("cuda", dtype=dtype):
            yield
    return context


def reference_step(ref, x, dy, precision: str):
    """A float64 copy of ``ref`` (float32, in its current state) after one :func:`train_step`
    on ``x`` and ``dy`` (float32): at bf16 and fp16 of the model, x and dY rounded to that
    dtype first (the 16-bit step's exact counterpart), otherwise of the float32 ones."""
    dtype = step_dtype(precision)
    ref64 = copy.deepcopy(ref).to(dtype).double()
    train_step(ref64, dy.to(dtype).double())(x.to(dtype).double())
    return ref64


def train_step(model, dy, module=None):
    """A callable ``step(x)``: the parameters' gradients set to None, then
    ``model(x).backward(dy)``; ``module`` holds the parameters when ``model`` is a compiled
    wrapper of it (default: ``model`` itself)."""
    params = list((module or model).parameters())

    def step(x):
        for p in params:
            p.grad = None
        model(x).backward(dy)
    return step


def grad_rel_err(model, ref64) -> float:
    """The largest normwise relative error, over :data:`GRAD_PARAMS`, of ``model``'s
    gradients against ``ref64``'s (float64, same step)."""
    got, want = dict(model.named_parameters()), dict(ref64.named_parameters())
    return max(bench.rel_err(got[n].grad, want[n].grad) for n in GRAD_PARAMS)


def peak_mib(step, x, module) -> float:
    """Peak memory one ``step(x)`` allocates above what is allocated before it, ``module``'s
    gradients let go first (MiB): the saved activations, the gradients and the workspaces."""
    import torch
    module.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(x)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def measure(problem: str, precisions, impls, args, env: dict) -> list[dict]:
    """The rows of one problem at its KernelBench shape, a table per precision (x and dY in
    :func:`step_dtype`, the implementations built at :func:`build_precision`, each call in
    :func:`step_context`)."""
    import torch

    from ..reference import make_reference
    shape = PRESETS[problem]
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=args.seed).cuda().train()
    state0 = copy.deepcopy(ref.state_dict())
    x32 = bench.bench_input(shape, args.seed).cuda()
    dy32 = torch.randn(shape.batch, shape.out_features,
                       generator=torch.Generator().manual_seed(2000 + args.seed)).cuda()
    rows, refs = [], {}
    for precision in precisions:
        todo = [i for i in impls if bench.available(i, AUTOCAST.get(precision, precision))]
        dtype = step_dtype(precision)
        x, dy = x32.to(dtype), dy32.to(dtype)
        if dtype not in refs:  # the float64 step of the float32 model (fp32, tf32, 3xtf32, autocast) or the 16-bit one
            ref.load_state_dict(state0)
            refs[dtype] = reference_step(ref, x32, dy32, precision)
        ref64 = refs[dtype]
        steps, forwards, extra = {}, {}, {}
        for impl in todo:
            ref.load_state_dict(state0)
            model, module = bench.build_impl(impl, ref, build_precision(precision))  # stage, copy of ref, or its compile
            context = step_context(precision, impl)
            step = train_step(model, dy, module)
            with context():
                step(x)  # builds, compiles; the gradients of one step from state0
                peak = peak_mib(step, x, module)
            extra[impl] = (peak, grad_rel_err(module, ref64))  # (outside autocast)
            steps[impl] = (step, context)
            forwards[impl] = (model, context)
        times = bench.time_round_robin(steps, x, args.warmup, args.iters, args.rounds, hold_us=args.hold_us)
        fwd = bench.time_round_robin(forwards, x, args.warmup, args.iters, args.rounds)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for impl in todo:
            median, lo, hi, _, device = times[impl]
            rows.append({"problem": problem, "batch": shape.batch, "in_features": shape.in_features,
                         "out_features": shape.out_features, "precision": precision, "impl": impl,
                         "median_ms": bench._sig(median), "min_ms": bench._sig(lo), "max_ms": bench._sig(hi),
                         "iters": args.iters, "forward_ms": bench._sig(fwd[impl][0]),
                         "peak_mib": bench._sig(extra[impl][0], 5), "grad_rel_err": bench._sig(extra[impl][1], 3),
                         **{k: env[k] for k in ("gpu", "torch", "cuda", "commit")}, "timestamp": now,
                         "device_ms": "" if device is None else bench._sig(device)})
            print(f"{problem:>3} {precision:13} {impl:8} step {median:8.3f} ms  forward {fwd[impl][0]:7.3f} ms  "
                  f"peak {extra[impl][0]:7.0f} MiB  grad err {extra[impl][1]:.1e}", file=sys.stderr, flush=True)
        del steps, forwards
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", default="all", help="comma list of 84, 33, 39, or all (default)")
    p.add_argument("--precision", default="all",
                   help="comma list of fp32, tf32, 3xtf32, bf16, fp16, autocast-bf16, or the groups all (fp32, "
                        "tf32, 3xtf32: the default) and 16bit (bf16, fp16: the module, x and dY in that dtype); "
                        "autocast-bf16: the float32 module under torch.autocast(\"cuda\", dtype=torch.bfloat16)")
    p.add_argument("--impl", default="all", help=f"comma list of {', '.join(IMPLS)}, or all (default)")
    p.add_argument("--iters", type=int, default=bench.MIN_ITERS, help="timed calls of each implementation")
    p.add_argument("--warmup", type=int, default=bench.MIN_WARMUP, help="untimed calls first")
    p.add_argument("--rounds", type=int, default=bench.ROUNDS, help="round-robin rounds (as the bench)")
    p.add_argument("--hold-us", type=float, default=0.0, help="also time each call with the stream held for this many µs before it (a spinning kernel, so the host has enqueued the call before it starts): the column device_ms (the step), the GPU's time without its waits for the host; 0 (default): not measured. Must exceed the host's time to enqueue a call (host_us); 2000 covers a train step")
    p.add_argument("--seed", type=int, default=0, help="seed of the model parameters and inputs")
    p.add_argument("--out", type=Path, help="CSV to write (default results/<gpu>/train_step.csv)")
    p.add_argument("--fresh", action="store_true", help="start a new file (else append)")


def main(args) -> int:
    try:
        problems = bench.parse_list(args.problem, tuple(PROBLEMS), what="problem")
        precisions = parse_precisions(args.precision)
        impls = bench.parse_list(args.impl, IMPLS, what="impl")
        bench.round_calls(args.iters, args.rounds)
        if args.hold_us < 0:
            raise ValueError(f"--hold-us {args.hold_us:g}: expected a time of at least 0 µs")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("error: train-step needs a CUDA device", file=sys.stderr)
        return 2
    env = bench._environment()
    try:
        out = records.results_csv(args.out, env, "train_step.csv", COLUMNS, SOURCES, args.fresh)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bench._prebuild({i for i in impls if i in bench.STAGE_IMPLS})
    for problem in problems:
        bench.append_rows(out, measure(problem, precisions, impls, args, env), COLUMNS)
    print(f"wrote {out}")
    return 0
