"""Per-kernel profiles of the benchmark's implementations: device time per kernel and call
from ``torch.profiler`` (:func:`profile_kernels`) and, where Nsight Compute is on PATH,
DRAM bytes and SM throughput from ``ncu`` in a child process (:func:`run_ncu`); rows of
profile.csv (:data:`fusedlib.lab.records.PROFILE_COLUMNS`, :func:`profile_rows`).
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .records import PACKAGE_PARENT
from .timing import FLUSH_MB, peer_precision

NCU_METRICS = ("dram__bytes.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed")


def profile_kernels(fn, x, calls: int = 5, flush_mb: int = FLUSH_MB) -> list[tuple[str, int, float]]:
    """Device kernels of one call of ``fn(x)``: (kernel name, launches per call, device µs
    per call), from ``torch.profiler`` over ``calls`` calls, each after the same L2 flush as
    :func:`fusedlib.lab.timing.time_cuda`. The flush's own kernels are left out (found by profiling the flush
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


def profile_rows(table, impl: str, kernels, ncu: dict | None = None) -> list[dict]:
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


def ncu_command(ncu: str, log: Path, table, impl: str, seed: int = 0) -> list[str]:
    """Nsight Compute command that profiles one call of ``impl`` (:func:`_ncu_target`):
    clocks left alone (``--clock-control none``), profiling only between
    cudaProfilerStart/Stop, the two metrics of :data:`NCU_METRICS`, CSV in base units."""
    code = (f"from fusedlib.lab.profiling import _ncu_target; _ncu_target({table.problem!r}, {str(table.shape)!r}, "
            f"{table.mode!r}, {table.precision!r}, {impl!r}, {seed})")
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS),
            "--csv", "--print-units", "base", "--log-file", str(log), sys.executable, "-c", code]


def run_ncu(table, impl: str, seed: int = 0, timeout_s: int = 600) -> dict:
    """Run :func:`ncu_command` in a child process; returns :func:`parse_ncu_csv`'s dict.

    Raises:
        RuntimeError: ncu is not on PATH, failed, or timed out (message holds its output's end).
    """
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        try:
            proc = subprocess.run(ncu_command(ncu, log, table, impl, seed), capture_output=True, text=True,
                                  env=env, timeout=timeout_s)
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

    from ..reference import make_reference, parse_shape
    from .bench import PEER_IMPLS, bench_input, build_impl
    s = parse_shape(shape)
    ref = make_reference(problem, s.in_features, s.out_features, seed=seed).cuda().train(mode == "train")
    x = bench_input(s, seed, precision).cuda()
    fn, _ = build_impl(impl, ref, precision)
    with peer_precision(precision if impl in PEER_IMPLS else "fp32"), torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fn(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
