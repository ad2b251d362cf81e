"""run245 (prepared; one H200 or H100; issue 36's train step ≤ 0.85 × eager): where a short train
step's time goes. At 84 and 33 in bf16 the fused step's kernels add up to about 466 and 437 µs
(run241's profile: the forward's GEMM and row pass, the backward's passes and dW's GEMM, and
seven small ATen launches: a cat, copies, 84's sum of the scale's column terms, the bias's zeros,
three casts of the vector gradients to bf16), while the step measures 0.57–0.76 ms (train_step.csv,
run241): 100–300 µs in which the GPU may be waiting for the host.

Each train step (the harness's: fusedlib.lab.trainstep.train_step, bf16 and autocast-bf16, fused
and eager, at 84's and 33's KernelBench shapes) is profiled alone as the timing protocol runs it
(fusedlib.lab.timing._timed_call: the L2 flush, the step, a synchronize), torch.profiler with CPU
and CUDA activity, five times after warm-up. From the kernels after the flush's: the span from the
first kernel's start to the last one's end, the time some kernel runs (their union), the idle
rest and its three longest gaps with the kernels around them, the kernel count, and the host time
of the step (its record_function's CPU span; the profiler's own work adds to the host time and
to the gaps of both implementations alike). Writes $OUT/run245-steps.csv and $OUT/run245-gaps.csv;
prints both, a row a case (the median step)."""
import os
import statistics
from pathlib import Path

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from fusedlib.lab import bench
from fusedlib.lab.timing import _flush_buffer
from fusedlib.lab.trainstep import build_precision, step_context, step_dtype, train_step
from fusedlib.reference import PRESETS, make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))


def one_step(step, x, flush, context) -> dict:
    """One profiled step as the timing protocol runs it: its kernels' span, busy and idle time (µs),
    the idle gaps, the kernel count and the host time."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        with context(), record_function("train_step"):
            step(x)
        torch.cuda.synchronize()
    events = prof.events()
    host = next(e for e in events if e.name == "train_step")
    # (the step's record_function also shows on the GPU, as an annotation: not a kernel)
    kernels = sorted((e for e in events if e.device_type.name == "CUDA" and e.name != "train_step"),
                     key=lambda e: e.time_range.start)
    kernels = kernels[1:]  # the flush's own kernel first
    spans = [(e.time_range.start, e.time_range.end, e.name) for e in kernels]
    busy, gaps = 0.0, []
    cur_s, cur_e, cur_name = spans[0]  # the merged interval so far, and its last-ending kernel
    for s, t, name in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append((s - cur_e, cur_name, name))
            cur_s, cur_e, cur_name = s, t, name
        elif t > cur_e:
            cur_e, cur_name = t, name
    busy += cur_e - cur_s
    span = cur_e - spans[0][0]
    return {"span_us": span, "busy_us": busy, "idle_us": span - busy, "kernels": len(spans),
            "host_us": host.time_range.elapsed_us(), "gaps": sorted(gaps, reverse=True)[:3]}


def main() -> None:
    rows, gap_rows = [], []
    for problem in ("84", "33"):
        shape = PRESETS[problem]
        ref = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda().train()
        state0 = {k: v.clone() for k, v in ref.state_dict().items()}
        x32 = bench.bench_input(shape, 0).cuda()
        dy32 = torch.randn(shape.batch, shape.out_features, generator=torch.Generator().manual_seed(2000)).cuda()
        flush = _flush_buffer(x32, 256)
        for precision in ("bf16", "autocast-bf16"):
            dtype = step_dtype(precision)
            x, dy = x32.to(dtype), dy32.to(dtype)
            for impl in ("fused", "eager"):
                ref.load_state_dict(state0)
                model, module = bench.build_impl(impl, ref, build_precision(precision))
                step, context = train_step(model, dy, module), step_context(precision, impl)
                with context():
                    for _ in range(10):
                        step(x)
                torch.cuda.synchronize()
                steps = [one_step(step, x, flush, context) for _ in range(5)]
                med = sorted(steps, key=lambda r: r["span_us"])[2]
                row = {"problem": problem, "precision": precision, "impl": impl,
                       **{k: round(statistics.median(r[k] for r in steps), 1) for k in ("span_us", "busy_us", "idle_us", "host_us")},
                       "kernels": med["kernels"]}
                rows.append(row)
                gap_rows += [{"problem": problem, "precision": precision, "impl": impl, "gap_us": round(g, 1),
                              "after": a[:70], "before": b[:70]} for g, a, b in med["gaps"]]
                print(row, flush=True)
    pd.set_option("display.width", 220)
    steps, gaps = pd.DataFrame(rows), pd.DataFrame(gap_rows)
    steps.to_csv(OUT / "run245-steps.csv", index=False)
    gaps.to_csv(OUT / "run245-gaps.csv", index=False)
    print(steps.to_string(index=False))
    print(gaps.to_string(index=False))


if __name__ == "__main__":
    main()
