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

Columns (:data:`COLUMNS`): problem, batch, in_features, out_features, precision, impl,
median_ms, min_ms, max_ms, iters, forward_ms, peak_mib, grad_rel_err, gpu, torch, cuda,
commit, timestamp. The kernel sources the rows were measured on are recorded beside, in
``train_step.sources.json`` (:func:`fusedlib.lab.bench.stamp_sources`): ``--fresh`` starts a
new file.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import sys
from pathlib import Path

from . import bench, records
from ..reference import PRESETS, PROBLEMS

COLUMNS = ["problem", "batch", "in_features", "out_features", "precision", "impl", "median_ms", "min_ms", "max_ms",
           "iters", "forward_ms", "peak_mib", "grad_rel_err", "gpu", "torch", "cuda", "commit", "timestamp"]
#: Implementations: the four stages, eager PyTorch and torch.compile (default mode).
IMPLS = ("naive", "fold", "sums", "fused", "eager", "compile")
#: The record of the kernel sources the rows were measured on, beside the CSV.
SOURCES = "train_step.sources.json"
#: Parameters whose gradients enter ``grad_rel_err``.
GRAD_PARAMS = ("gemm.weight", "scale", "bn.weight", "bn.bias")


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
    """The rows of one problem at its KernelBench shape, a table per precision."""
    import torch

    from ..reference import make_reference
    shape = PRESETS[problem]
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=args.seed).cuda().train()
    state0 = copy.deepcopy(ref.state_dict())
    x = bench.bench_input(shape, args.seed).cuda()
    dy = torch.randn(shape.batch, shape.out_features, generator=torch.Generator().manual_seed(2000 + args.seed)).cuda()
    ref64 = copy.deepcopy(ref).double()
    train_step(ref64, dy.double())(x.double())
    rows = []
    for precision in precisions:
        todo = [i for i in impls if bench.available(i, precision)]
        steps, forwards, extra = {}, {}, {}
        for impl in todo:
            ref.load_state_dict(state0)
            model, module = bench.build_impl(impl, ref, precision)  # stage, copy of ref, or its compile
            context = precision if impl in bench.PEER_IMPLS else "fp32"
            step = train_step(model, dy, module)
            with bench.peer_precision(context):
                step(x)  # builds, compiles; the gradients of one step from state0
                extra[impl] = (peak_mib(step, x, module), grad_rel_err(module, ref64))
            steps[impl] = (step, context)
            forwards[impl] = (model, context)
        times = bench.time_round_robin(steps, x, args.warmup, args.iters, args.rounds)
        fwd = bench.time_round_robin(forwards, x, args.warmup, args.iters, args.rounds)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for impl in todo:
            median, lo, hi, _ = times[impl]
            rows.append({"problem": problem, "batch": shape.batch, "in_features": shape.in_features,
                         "out_features": shape.out_features, "precision": precision, "impl": impl,
                         "median_ms": bench._sig(median), "min_ms": bench._sig(lo), "max_ms": bench._sig(hi),
                         "iters": args.iters, "forward_ms": bench._sig(fwd[impl][0]),
                         "peak_mib": bench._sig(extra[impl][0], 5), "grad_rel_err": bench._sig(extra[impl][1], 3),
                         **{k: env[k] for k in ("gpu", "torch", "cuda", "commit")}, "timestamp": now})
            print(f"{problem:>3} {precision:6} {impl:8} step {median:8.3f} ms  forward {fwd[impl][0]:7.3f} ms  "
                  f"peak {extra[impl][0]:7.0f} MiB  grad err {extra[impl][1]:.1e}", file=sys.stderr, flush=True)
        del steps, forwards
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", default="all", help="comma list of 84, 33, 39, or all (default)")
    p.add_argument("--precision", default="all", help="fp32, tf32, 3xtf32 or all (default; comma list)")
    p.add_argument("--impl", default="all", help=f"comma list of {', '.join(IMPLS)}, or all (default)")
    p.add_argument("--iters", type=int, default=bench.MIN_ITERS, help="timed calls of each implementation")
    p.add_argument("--warmup", type=int, default=bench.MIN_WARMUP, help="untimed calls first")
    p.add_argument("--rounds", type=int, default=bench.ROUNDS, help="round-robin rounds (as the bench)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model parameters and inputs")
    p.add_argument("--out", type=Path, help="CSV to write (default results/<gpu>/train_step.csv)")
    p.add_argument("--fresh", action="store_true", help="start a new file (else append)")


def main(args) -> int:
    try:
        problems = bench.parse_list(args.problem, tuple(PROBLEMS), what="problem")
        precisions = bench.parse_list(args.precision, bench.PRECISIONS, what="precision")
        impls = bench.parse_list(args.impl, IMPLS, what="impl")
        bench.round_calls(args.iters, args.rounds)
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
