"""``python -m fusedlib bench``: time every stage and peer in one process on the GPU.

Method (DESIGN.md §6): CUDA events around each call; ``--warmup`` calls first (≥ 10);
a 256 MB write before every timed call flushes L2; ``--iters`` timed calls (≥ 50);
median (quoted), min and max in ms. Peers: PyTorch eager (the reference module),
``torch.compile`` modes ``default`` and ``max-autotune-no-cudagraphs``, and GEMM-only
(``F.linear``) — at fp32, and at tf32 through a scoped setting restored afterwards.
Each implementation's normwise relative error against a float64 reference is measured on
a separate call. Every row is appended to the CSV as soon as it is measured.

CSV contract (``results/<gpu>/bench.csv``): :data:`COLUMNS`. ``tflops`` and
``gbytes_per_s`` divide the cost model's useful FLOPs and compulsory bytes
(:mod:`fusedlib.costmodel`) by the median time.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import datetime
import json
import subprocess
import sys
from pathlib import Path

from .costmodel import IMPLS

COLUMNS = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl", "median_ms",
           "min_ms", "max_ms", "iters", "tflops", "gbytes_per_s", "rel_err", "gpu", "torch", "cuda", "commit",
           "timestamp"]
STAGE_IMPLS, PEER_IMPLS = IMPLS[:4], IMPLS[4:]
ROOT = Path(__file__).resolve().parent.parent
#: H100 SXM datasheet: HBM3 TB/s, dense FP32 and TF32 TFLOP/s.
DATASHEET_H100 = {"bandwidth_gbytes_per_s": 3350.0, "fp32_tflops": 67.0, "tf32_tflops": 495.0}
#: Size sweeps (--sweep): batch at 4096→4096, features (K = M) at batch 1024.
SWEEPS = {"batch": [f"{b}x4096->4096" for b in (256, 1024, 4096, 16384)],
          "features": [f"1024x{f}->{f}" for f in (1024, 2048, 4096, 8192)]}


def gpu_slug(name: str) -> str:
    """``results/<slug>`` for a device name: h100, h200, a100, else its letters and digits."""
    low = name.lower()
    for slug in ("h100", "h200", "a100"):
        if slug in low:
            return slug
    return "".join(ch for ch in low if ch.isalnum()) or "gpu"


@contextlib.contextmanager
def peer_precision(precision: str):
    """Scoped TF32 switch for the PyTorch peers: on for "tf32", off otherwise; the previous
    flags are restored on exit, also after an exception."""
    import torch
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    flag = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = flag
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def time_cuda(fn, x, warmup: int = 10, iters: int = 50, flush_mb: int = 256) -> tuple[float, float, float]:
    """(median, min, max) in ms of ``fn(x)`` over ``iters`` calls timed with CUDA events,
    after ``warmup`` calls, with a ``flush_mb`` MB write before each timed call. For a CPU
    tensor (a dry run of the harness) the host clock times each call and nothing is flushed."""
    import time

    import torch
    for _ in range(warmup):
        fn(x)
    if not x.is_cuda:
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            fn(x)
            times.append((time.perf_counter() - start) * 1e3)
        times.sort()
        return times[len(times) // 2], times[0], times[-1]
    flush = torch.empty(flush_mb * (1 << 20) // 4, device=x.device, dtype=torch.float32)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn(x)
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2], times[0], times[-1]


def implementations(problem: str, shape, mode: str, precision: str, impls, seed: int = 0, device: str = "cuda"):
    """Yield (impl, callable) for each requested implementation that exists at this
    precision (peers have no 3xtf32; stages other than fused are fp32 only)."""
    import torch

    import fusedlib
    from .reference import make_reference
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=seed).to(device)
    ref.train(mode == "train")
    for impl in impls:
        if impl in STAGE_IMPLS:
            if precision != "fp32" and impl != "fused":
                continue
            yield impl, fusedlib.from_reference(ref, stage=impl, precision=precision)
        elif precision == "3xtf32":
            continue
        elif impl == "eager":
            yield impl, copy.deepcopy(ref)
        elif impl == "gemm_only":
            w, b = ref.gemm.weight, ref.gemm.bias
            yield impl, lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)
        else:
            mode_name = "default" if impl == "compile" else "max-autotune-no-cudagraphs"
            yield impl, torch.compile(copy.deepcopy(ref), mode=mode_name)


def _environment(device: str = "cuda") -> dict:
    import platform

    import torch
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu {platform.machine()}"
    return {"gpu": name, "torch": torch.__version__, "cuda": torch.version.cuda or "none",
            "commit": commit.stdout.strip() or "unknown"}


def make_row(problem: str, shape, mode: str, precision: str, impl: str, times, iters: int, rel_err: float,
             env: dict) -> dict:
    """One CSV row (:data:`COLUMNS`), throughput from the cost model at the median time."""
    from .costmodel import cost
    from .reference import problem_kind
    median, lo, hi = times
    c = cost(problem_kind(problem), impl, shape.batch, shape.in_features, shape.out_features, mode, precision)
    return {"problem": problem, "batch": shape.batch, "in_features": shape.in_features,
            "out_features": shape.out_features, "mode": mode, "precision": precision, "impl": impl,
            "median_ms": median, "min_ms": lo, "max_ms": hi, "iters": iters,
            "tflops": c.flops / (median * 1e-3) / 1e12, "gbytes_per_s": c.bytes / (median * 1e-3) / 1e9,
            "rel_err": rel_err, "gpu": env["gpu"], "torch": env["torch"], "cuda": env["cuda"],
            "commit": env["commit"], "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def append_row(path: Path, row: dict) -> None:
    """Append one row to the CSV at ``path`` (header first if the file is new).

    Raises:
        ValueError: the row's keys are not exactly :data:`COLUMNS`.
    """
    if list(row) != COLUMNS:
        raise ValueError(f"row: expected the columns {COLUMNS}, got {list(row)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def measure_ceilings(copy_mb: int = 1024, gemm: int = 8192) -> dict:
    """Device ceilings measured now: device-to-device copy bandwidth in GB/s (bytes read +
    written) and cuBLAS GEMM TFLOP/s at gemm³ in fp32 and tf32 (scoped); datasheet beside."""
    import torch
    src = torch.rand(copy_mb * (1 << 20) // 4, device="cuda")
    dst = torch.empty_like(src)
    ms, _, _ = time_cuda(lambda s: dst.copy_(s), src, warmup=3, iters=20, flush_mb=1)
    out = {"copy_gbytes_per_s": 2 * src.numel() * 4 / (ms * 1e-3) / 1e9}
    a, b = torch.rand(gemm, gemm, device="cuda"), torch.rand(gemm, gemm, device="cuda")
    for precision in ("fp32", "tf32"):
        with peer_precision(precision):
            ms, _, _ = time_cuda(lambda x: x @ b, a, warmup=3, iters=10, flush_mb=1)
        out[f"gemm_{precision}_tflops"] = 2 * gemm ** 3 / (ms * 1e-3) / 1e12
    del src, dst, a, b
    return out


def write_env(path: Path, ceilings: dict) -> None:
    """``results/<gpu>/env.json``: device, driver, clocks, SM count, L2, measured ceilings, datasheet."""
    import torch
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    env = {**_environment(), "driver_clocks": smi, "sm_count": props.multi_processor_count,
           "l2_bytes": getattr(props, "L2_cache_size", None), "memory_bytes": props.total_memory,
           "measured": ceilings, "datasheet": DATASHEET_H100}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env, indent=1) + "\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", default="84,33,39", help="comma list of 84, 33, 39")
    p.add_argument("--shape", action="append", help="preset or NxK->M, repeatable (default: the problem's KernelBench shape and v0)")
    p.add_argument("--sweep", choices=sorted(SWEEPS), help="size sweep instead of --shape")
    p.add_argument("--mode", default="train,eval")
    p.add_argument("--precision", default="fp32,tf32,3xtf32")
    p.add_argument("--impl", default=",".join(STAGE_IMPLS + PEER_IMPLS))
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", type=Path, help="CSV path (default results/<gpu>/bench.csv)")
    p.add_argument("--fresh", action="store_true", help="start a new CSV instead of appending")
    p.add_argument("--ceilings", action="store_true", help="measure copy bandwidth and GEMM rates into env.json")
    p.add_argument("--profile", action="store_true", help="per-kernel times (torch.profiler) into profile.csv")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a dry run of the harness on the stage algebra (host clock, --out required)")


def profile_kernels(fn, x, calls: int = 5) -> list[tuple[str, int, float]]:
    """(kernel name, calls, mean µs per call) of the CUDA kernels one call of ``fn`` runs."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        if not str(getattr(evt, "device_type", "")).endswith("CUDA"):
            continue  # CPU-side operator entries would count their kernels twice
        device_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if device_us > 0 and evt.count:
            rows.append((evt.key, max(1, evt.count // calls), device_us / calls))
    return rows


def main(args) -> int:
    import torch
    from tqdm import tqdm

    from .reference import PRESETS, get_inputs, parse_shape
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: bench needs a CUDA device (or --device cpu --out FILE for a dry run)", file=sys.stderr)
        return 2
    if args.device == "cpu" and (args.out is None or args.ceilings or args.profile):
        print("error: --device cpu is a dry run: give --out, and no --ceilings or --profile", file=sys.stderr)
        return 2
    env = _environment(args.device)
    outdir = ROOT / "results" / gpu_slug(env["gpu"])
    out = args.out or outdir / "bench.csv"
    if args.fresh and out.exists():
        out.unlink()
    if args.ceilings:
        write_env(outdir / "env.json", measure_ceilings())
    problems = args.problem.split(",")
    modes, precisions, impls = args.mode.split(","), args.precision.split(","), args.impl.split(",")
    plan = []
    for problem in problems:
        shapes = SWEEPS[args.sweep] if args.sweep else (args.shape or [problem, "v0"])
        plan += [(problem, parse_shape(s), mode, prec) for s in shapes for mode in modes for prec in precisions]
    gen = torch.Generator().manual_seed(0)
    for problem, shape, mode, precision in tqdm(plan, desc="bench", unit="table", file=sys.stderr):
        x = get_inputs(shape, "randn" if shape == PRESETS["v0"] else "rand", gen).to(args.device)
        for impl, fn in implementations(problem, shape, mode, precision, impls, device=args.device):
            try:
                with peer_precision(precision), torch.no_grad():
                    rel = _rel_err(fn, impl, problem, shape, mode, x)
                    times = time_cuda(fn, x, args.warmup, args.iters)
                    if args.profile:
                        _append_profile(outdir / "profile.csv", problem, shape, mode, precision, impl,
                                        profile_kernels(fn, x))
            except Exception as exc:  # e.g. a torch.compile failure: keep the rest of the run
                print(f"warning: {impl} {problem} {shape} {mode} {precision} failed: {exc}", file=sys.stderr)
                continue
            append_row(out, make_row(problem, shape, mode, precision, impl, times, args.iters, rel, env))
    print(f"wrote {out}")
    return 0


def _rel_err(fn, impl, problem, shape, mode, x) -> float:
    """Normwise relative error of one call against the float64 reference model (same seed,
    same mode, fresh state; in train mode both use the batch statistics of x). GEMM-only is
    compared with the float64 Linear."""
    import torch

    from .reference import make_reference
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=0).to(x.device).double()
    ref.train(mode == "train")
    y64 = torch.nn.functional.linear(x.double(), ref.gemm.weight, ref.gemm.bias) if impl == "gemm_only" \
        else ref(x.double())
    y = fn(x)
    return ((y.double() - y64).norm() / y64.norm()).item()


def _append_profile(path: Path, problem, shape, mode, precision, impl, kernels) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["problem", "shape", "mode", "precision", "impl", "kernel", "calls", "cuda_time_us_per_call"])
        for name, calls, us in kernels:
            w.writerow([problem, str(shape), mode, precision, impl, name, calls, f"{us:.3f}"])
