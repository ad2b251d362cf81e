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

Implementations (the ``impl`` column, :data:`fusedlib.lab.costmodel.IMPLS`): the stages
``naive``, ``fold``, ``sums``, ``fused`` (:func:`fusedlib.from_reference`; CUDA kernels on
CUDA tensors); the peers ``eager`` (the reference module), ``compile``
(``torch.compile`` mode "default"), ``compile_max_autotune`` (mode
"max-autotune-no-cudagraphs"), both static-shape and compiled afresh for each table, and
``gemm_only`` (``F.linear``: the floor a fused version is judged against). Precisions: every
stage runs fp32, tf32 and 3xtf32 (one GEMM engine under all four, :mod:`fusedlib.engine`);
the peers run fp32 and tf32, tf32 through a scoped setting (:func:`peer_precision`), and
have no 3xtf32. The 16-bit precisions bf16 and fp16 (``--precision 16bit``; not in ``all``,
which stays fp32, tf32 and 3xtf32) name a dtype: every implementation runs in it, the
stages as the fusedlib modules built at the GEMM precision of
:func:`fusedlib.kernelbench.gemm_precision` (tf32, exact for 16-bit operands) then
``.to(dtype)``, the peers on the reference model ``.to(dtype)`` (``gemm_only``: cuBLAS in the
dtype), the input in the dtype (:func:`build_impl`, :func:`bench_input`); their float64
reference is the model with the 16-bit parameters and input, so ``rel_err`` is the
implementation's own error, not the rounding of its inputs.

Outputs, next to each other (``results/<gpu>/`` unless ``--out`` names another CSV):
``bench.csv`` (:data:`COLUMNS`, a table's rows appended as soon as the table is timed), ``env.json``
(``--ceilings``: device, driver, clocks, measured copy bandwidth and cuBLAS GEMM rates at
fp32, tf32 and bf16, datasheet values) and ``profile.csv`` (``--profile``: per-kernel device time from
torch.profiler, :data:`PROFILE_COLUMNS`; with ``--ncu`` also DRAM bytes and SM throughput
measured by Nsight Compute), and ``sources.json`` (the SHA-256 of the kernel sources the rows
were measured on, :func:`stamp_sources`). ``tflops`` and ``gbytes_per_s`` divide the cost model's FLOPs
and compulsory bytes (:mod:`fusedlib.lab.costmodel`; at bf16 and fp16, X, W and Y at 2 bytes an
element) by the median time.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..reference import PRESETS, PROBLEMS, Shape, parse_shape, problem_kind
from .costmodel import ALL_PRECISIONS, IMPLS, MODES, PRECISIONS, PRECISIONS_16, stage_precision
# The timing protocol, the records and the profiles live in their own modules; their names are
# also reachable from here, where the benchmark's callers have always found them.
from .profiling import (NCU_METRICS, kernel_base, ncu_command, parse_ncu_csv, profile_kernels,  # noqa: F401
                        profile_rows, run_ncu)
from .records import (COLUMNS, PACKAGE_PARENT, PROFILE_COLUMNS, _environment, _sig, append_row,  # noqa: F401
                      append_rows, check_header, gpu_slug, make_row, stamp_sources)
from .timing import (CALLS_PER_ROUND, FLUSH_MB, MAX_ITERS, MIN_ITERS, MIN_TIMED_MS, MIN_WARMUP,  # noqa: F401
                     ROUNDS, TimingError, _summary, _timed_call, iters_for, peer_precision, round_calls,
                     table_iters, time_cuda, time_round_robin)

STAGE_IMPLS, PEER_IMPLS = IMPLS[:4], IMPLS[4:]
COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune-no-cudagraphs"}
#: The SXM parts' datasheets, by results folder (:func:`gpu_slug`): HBM bandwidth (GB/s), dense
#: FP32, TF32 and BF16 rates (TFLOP/s; dense FP16 is BF16's). The H200 is the H100's chip with
#: HBM3e: the same rates, more bandwidth.
DATASHEETS = {"h100": {"device": "H100 SXM", "bandwidth_gbytes_per_s": 3350.0, "fp32_tflops": 67.0,
                       "tf32_tflops": 495.0, "bf16_tflops": 989.0},
              "h200": {"device": "H200 SXM", "bandwidth_gbytes_per_s": 4800.0, "fp32_tflops": 67.0,
                       "tf32_tflops": 495.0, "bf16_tflops": 989.0}}
DATASHEET_H100 = DATASHEETS["h100"]


def datasheet(env: dict | None) -> dict:
    """The datasheet of an env.json's device: :data:`DATASHEETS` by the folder name of its
    ``gpu`` (:func:`gpu_slug`), else the ``datasheet`` the env.json carries, else an empty dict
    (each sheet names its ``device``, so a plot or sentence says which one it used)."""
    env = env or {}
    return DATASHEETS.get(gpu_slug(env.get("gpu", "")), env.get("datasheet") or {})


#: Names of ``--precision`` lists: ``all`` the float32 modules' GEMM precisions (what ``make
#: results`` has always timed), ``16bit`` the 16-bit dtypes.
PRECISION_GROUPS = {"all": PRECISIONS, "16bit": PRECISIONS_16}
#: Size sweeps: batch at BATCH_SWEEP_FEATURES→BATCH_SWEEP_FEATURES, features (K = M) at
#: FEATURE_SWEEP_BATCH rows, and in_features (K alone) at FEATURE_SWEEP_BATCH rows →
#: IN_FEATURE_SWEEP_OUT (84's batch and out_features: the line t = a + b·K of a GEMM kernel,
#: :func:`fusedlib.lab.figures.gemm_time_lines`); the sizes are overridable (--batches,
#: --features, --in-features).
SWEEP_BATCHES = (256, 1024, 4096)
SWEEP_FEATURES = (1024, 2048, 4096, 8192)
SWEEP_IN_FEATURES = (2048, 4096, 8192, 16384)
BATCH_SWEEP_FEATURES, FEATURE_SWEEP_BATCH, IN_FEATURE_SWEEP_OUT = 4096, 1024, 8192


# --------------------------------------------------------------------------- selection

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


def parse_precisions(text: str) -> list[str]:
    """``--precision``: a comma list of :data:`ALL_PRECISIONS` and the names of
    :data:`PRECISION_GROUPS` (``all``: fp32, tf32, 3xtf32; ``16bit``: bf16, fp16), in the order
    of :data:`ALL_PRECISIONS`.

    Raises:
        ValueError: an entry is neither a precision nor a group.
    """
    return parse_list(text, ALL_PRECISIONS, PRECISION_GROUPS, what="precision")


def available(impl: str, precision: str) -> bool:
    """Whether ``impl`` runs at ``precision``: the four stages run every precision; the
    peers have fp32, tf32, bf16 and fp16 (PyTorch has no 3xTF32 mode).

    Raises:
        ValueError: unknown precision.
    """
    if precision not in ALL_PRECISIONS:
        raise ValueError(f"precision: expected one of {ALL_PRECISIONS}, got {precision!r}")
    if impl in STAGE_IMPLS:
        return True
    return precision != "3xtf32"


def table_dtype(precision: str):
    """The dtype of a table's modules and input: ``torch.bfloat16`` for bf16,
    ``torch.float16`` for fp16, ``torch.float32`` for the GEMM precisions.

    Raises:
        ValueError: unknown precision.
    """
    import torch
    if precision not in ALL_PRECISIONS:
        raise ValueError(f"precision: expected one of {ALL_PRECISIONS}, got {precision!r}")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


@dataclass(frozen=True)
class Table:
    """Implementations timed together: one problem, shape, mode and precision."""

    problem: str
    shape: Shape
    mode: str
    precision: str
    impls: tuple[str, ...]


def sweep_shapes(kind: str, batches=SWEEP_BATCHES, features=SWEEP_FEATURES,
                 in_features=SWEEP_IN_FEATURES) -> list[Shape]:
    """Shapes of a size sweep: ``batch`` (N in ``batches`` at 4096→4096), ``features``
    (K = M in ``features`` at batch 1024) or ``in_features`` (K in ``in_features`` at batch
    1024 → 8192 out_features).

    Raises:
        ValueError: unknown sweep kind.
    """
    if kind == "batch":
        return [Shape(b, BATCH_SWEEP_FEATURES, BATCH_SWEEP_FEATURES) for b in batches]
    if kind == "features":
        return [Shape(FEATURE_SWEEP_BATCH, f, f) for f in features]
    if kind == "in_features":
        return [Shape(FEATURE_SWEEP_BATCH, k, IN_FEATURE_SWEEP_OUT) for k in in_features]
    raise ValueError(f"sweep: expected 'batch', 'features' or 'in_features', got {kind!r}")


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


def unmeasured(tables: list[Table], out: Path) -> tuple[list[Table], int]:
    """``tables`` without the implementations ``out`` (a bench.csv) already holds a row for at
    the same problem, shape, mode and precision, so that the file keeps one run of each
    configuration (a size sweep then does not time the KernelBench shapes again); tables left
    with nothing to time are dropped. Returns (tables, number of measurements skipped)."""
    import csv
    if not out.exists():
        return tables, 0
    with out.open(newline="") as f:
        done = {(r["problem"], int(r["batch"]), int(r["in_features"]), int(r["out_features"]), r["mode"],
                 r["precision"], r["impl"]) for r in csv.DictReader(f)}
    kept, skipped = [], 0
    for t in tables:
        key = (t.problem, t.shape.batch, t.shape.in_features, t.shape.out_features, t.mode, t.precision)
        todo = tuple(i for i in t.impls if key + (i,) not in done)
        skipped += len(t.impls) - len(todo)
        if todo:
            kept.append(Table(t.problem, t.shape, t.mode, t.precision, todo))
    return kept, skipped


def rel_err(y, y64) -> float:
    """Normwise relative error ‖y − y64‖_F / ‖y64‖_F in float64 (NaN if y has NaN/inf)."""
    import torch
    return (torch.linalg.vector_norm(y.double() - y64) / torch.linalg.vector_norm(y64)).item()


def build_impl(impl: str, ref, precision: str, reset: bool = True):
    """(callable, module whose state to reset or None) for one implementation, built from the
    reference model ``ref`` (its device, parameters and train/eval mode) at the table's
    ``precision`` (one of :data:`ALL_PRECISIONS`).

    Stages: :func:`fusedlib.from_reference`. eager: a copy of ``ref``. compile peers: a copy
    of ``ref`` under ``torch.compile(mode=..., dynamic=False)``, after ``torch._dynamo.reset()``
    (unless ``reset`` is False) so that each table compiles afresh (no recompile limit, no
    dynamic-shape reuse). The bench builds a table's two compile peers side by side, both
    kept for the round-robin: it resets once per table and passes ``reset=False``, since a
    reset between them would drop the first one's compiled code.
    gemm_only: ``F.linear`` with ``ref``'s weight and bias.

    bf16 and fp16 (:data:`PRECISIONS_16`): every implementation in that dtype
    (:func:`table_dtype`), the input too (the caller's, :func:`bench_input`): the stages built
    at :func:`fusedlib.lab.costmodel.stage_precision`'s GEMM precision (tf32) then
    ``.to(dtype)``, eager and the compile peers on a copy of ``ref`` ``.to(dtype)``, gemm_only
    on the weight and bias in the dtype. ``ref`` itself is left in its dtype; the module
    returned for a state reset takes a float32 ``state_dict`` (``load_state_dict`` converts).
    """
    import torch

    from ..modules import from_reference
    dtype = table_dtype(precision)
    if impl in STAGE_IMPLS:
        module = from_reference(ref, stage=impl, precision=stage_precision(precision)).to(dtype)
        return module, module
    if impl == "gemm_only":
        w, b = ref.gemm.weight.to(dtype), ref.gemm.bias.to(dtype)
        return (lambda x: torch.nn.functional.linear(x, w, b)), None
    module = copy.deepcopy(ref).to(dtype)
    if impl == "eager":
        return module, module
    if reset:
        torch._dynamo.reset()
    return torch.compile(module, mode=COMPILE_MODES[impl], dynamic=False), module


# --------------------------------------------------------------------------- ceilings

def measure_ceilings(copy_mib: int = 1024, gemm: int = 8192) -> dict:
    """Device ceilings measured now, on the current CUDA device.

    Returns:
        ``copy_gbytes_per_s``: device-to-device copy of ``copy_mib`` MiB, bytes read +
        written per second (GB/s, median of 20); ``gemm_fp32_tflops`` and
        ``gemm_tf32_tflops``: cuBLAS ``torch.mm`` of two ``gemm``² fp32 matrices, 2·gemm³ FLOPs
        over the median of 10 (TFLOP/s), TF32 scoped by :func:`peer_precision`;
        ``gemm_bf16_tflops``: the same of the two matrices in bf16 (float32 accumulation; the
        rate of the 16-bit tables' roof, fp16's too); and the sizes used.
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
    a, b = a.bfloat16(), b.bfloat16()
    ms, _, _ = time_cuda(lambda x: torch.mm(x, b), a, warmup=3, iters=10, flush_mb=0)
    out["gemm_bf16_tflops"] = 2 * gemm ** 3 / (ms * 1e-3) / 1e12
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
    ceilings (:func:`measure_ceilings`) and the device's datasheet values (:func:`datasheet`).
    Returns the dict."""
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
           "memory_bytes": props.total_memory, "measured": ceilings,
           "datasheet": datasheet({"gpu": torch.cuda.get_device_name(index)}) or DATASHEET_H100,
           "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env, indent=1) + "\n")
    return env


# --------------------------------------------------------------------------- the run

def estimate_seconds(tables: list[Table], warmup: int, iters: int, profile: bool,
                     min_ms: float = MIN_TIMED_MS) -> float:
    """Rough wall time of a run on an H100 (s): each timed call at the cost model's roofs
    (GEMM rates in TFLOP/s: this project's engine, the same for every stage, 20 at fp32 on
    the SIMT path, 300 at tf32 and 100 at 3xtf32 on tensor cores, 450 at bf16 and fp16 (the
    16-bit GEMM, with Z and Y still float32 in memory); cuBLAS 50 at fp32, 330 at tf32 and 600 at
    bf16 and fp16 for the peers; 2.5 TB/s) plus 0.15 ms of flush and launch; 10 s per
    torch.compile, 30 s more per max-autotune of a new GEMM shape and precision; 1.5 s per
    profiled implementation; 60 s to build the kernels on a fresh machine; 10 s start-up.
    Timed calls per table as :func:`table_iters` would pick them from these call times. The round-robin (``--rounds``) changes the order of the calls, not their number, so the
    estimate does not depend on it."""
    from .costmodel import cost
    rates = {("stage", "fp32"): 20.0, ("stage", "tf32"): 300.0, ("stage", "3xtf32"): 100.0,
             ("stage", "bf16"): 450.0, ("stage", "fp16"): 450.0,
             ("peer", "fp32"): 50.0, ("peer", "tf32"): 330.0, ("peer", "bf16"): 600.0, ("peer", "fp16"): 600.0}
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
                   help="preset (84, 33, 39, v0) or NxK:M (batch x in_features : out_features, e.g. 64x256:128); repeatable. Default: each problem's "
                        "KernelBench shape and v0 (unless --sweep is given)")
    p.add_argument("--sweep", action="append", choices=("batch", "features", "in_features"),
                   help="size sweep (repeatable): batch N at 4096->4096, features K = M at batch 1024, or "
                        "in_features K alone at 1024 x K -> 8192")
    p.add_argument("--batches", default=",".join(map(str, SWEEP_BATCHES)), help="batch sizes of --sweep batch")
    p.add_argument("--features", default=",".join(map(str, SWEEP_FEATURES)), help="K = M of --sweep features")
    p.add_argument("--in-features", default=",".join(map(str, SWEEP_IN_FEATURES)), help="K of --sweep in_features")
    p.add_argument("--mode", default="all", help="train, eval or all (default; comma list)")
    p.add_argument("--precision", default="all",
                   help="comma list of fp32, tf32, 3xtf32, bf16, fp16, or the groups all (fp32, tf32, 3xtf32: "
                        "the default) and 16bit (bf16, fp16: the modules and the input in that dtype)")
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
    p.add_argument("--hold-us", type=float, default=0.0, help="also time each call with the stream held for this many µs before it (a spinning kernel, so the host has enqueued the call before it starts): the column device_ms, the GPU's time without its waits for the host; 0 (default): not measured. Must exceed the host's time to enqueue a call (host_us); 2000 covers a train step")
    p.add_argument("--seed", type=int, default=0, help="seed of the model parameters and inputs")
    p.add_argument("--out", type=Path, help="bench.csv to write (default results/<gpu>/bench.csv); "
                   "env.json, profile.csv and sources.json go next to it")
    p.set_defaults(fresh=False)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--append", dest="fresh", action="store_false", help="append to existing CSVs (default)")
    group.add_argument("--fresh", action="store_true", help="start new bench.csv (and profile.csv with --profile)")
    p.add_argument("--remeasure", action="store_true",
                   help="time configurations bench.csv already holds again (default: skip them: one run each)")
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
    precisions = parse_precisions(args.precision)
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
        in_features = [int(v) for v in args.in_features.split(",") if v.strip()]
    except ValueError as exc:
        raise ValueError(f"--batches/--features/--in-features: expected comma lists of integers ({exc})") from None
    shapes = {}
    for problem in problems:
        listed = [parse_shape(s) for s in (args.shape or [])]
        if not args.shape and not args.sweep:
            listed = [PRESETS[problem], PRESETS["v0"]]
        for sweep in args.sweep or []:
            listed += sweep_shapes(sweep, batches, features, in_features)
        shapes[problem] = list(dict.fromkeys(listed))
    return problems, shapes, modes, precisions, impls


def main(args) -> int:
    try:
        tables = plan_tables(*_selection(args))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.hold_us < 0:
        print(f"error: --hold-us {args.hold_us:g}: expected a time of at least 0 µs", file=sys.stderr)
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
    out = args.out or Path("results") / gpu_slug(env["gpu"]) / "bench.csv"
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
    if not args.fresh and not args.remeasure:
        tables, skipped = unmeasured(tables, out)
        if skipped:
            print(f"note: {skipped} measurement(s) already in {out} skipped (one run a configuration; "
                  "--remeasure times them again)", file=sys.stderr)
    if args.ncu and shutil.which("ncu") is None:
        print("warning: ncu is not on PATH: profile.csv gets no Nsight Compute columns", file=sys.stderr)
        args.ncu = False
    if args.ceilings:
        env_json = write_env(out.parent / "env.json", measure_ceilings())
        m = env_json["measured"]
        print(f"ceilings: copy {m['copy_gbytes_per_s']:.0f} GB/s, cuBLAS fp32 {m['gemm_fp32_tflops']:.1f}, "
              f"tf32 {m['gemm_tf32_tflops']:.1f} and bf16 {m['gemm_bf16_tflops']:.1f} TFLOP/s "
              f"-> {out.parent / 'env.json'}", file=sys.stderr)
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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")])))
    procs = {s: subprocess.Popen([sys.executable, "-c", f"from fusedlib.build import load_stage; load_stage({s!r})"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for s in sorted(stages)}
    failed = set()
    for stage, proc in procs.items():
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failed.add(stage)
            print(f"warning: building the {stage} kernels failed; its rows are skipped:\n{output[-1500:]}",
                  file=sys.stderr)
    return failed


def bench_input(shape, seed: int = 0, precision: str = "fp32"):
    """The timed input X (N, K) on the CPU, in the dtype of ``precision`` (:func:`table_dtype`:
    float32, or bf16/fp16 rounded from the same float32 draw): KernelBench's ``torch.rand``
    (``torch.randn`` at v0), drawn from a generator seeded ``1000 + seed`` — a stream of its own, as in
    :func:`fusedlib.check.case_model`. (Drawn from the stream that initialised the parameters,
    ``torch.manual_seed(seed)``, row i of X would be an affine function of row i of W: the
    diagonal of X Wᵀ then stands out by ~25 standard deviations and problem 84's softmax
    rows collapse onto one column each, which hides every error.)"""
    import torch

    from ..reference import get_inputs
    x = get_inputs(shape, "randn" if shape == PRESETS["v0"] else "rand", torch.Generator().manual_seed(1000 + seed))
    return x.to(table_dtype(precision))


def _run(tables: list[Table], args, env: dict, out: Path, profile_csv: Path) -> int:
    """Time every table (:func:`_time_table`), appending each row as soon as its table is
    measured; returns the number of failed measurements (each reported as a warning)."""
    import gc

    import torch
    from tqdm import tqdm

    from ..reference import make_reference
    failures = 0
    ref = state0 = x = y64 = z64 = None
    ref_key = x_key = y_key = None
    # On a terminal the bar redraws every second; in a log file every 30 s, to keep it short.
    bar = tqdm(total=sum(len(t.impls) for t in tables), desc="bench", unit="impl", file=sys.stderr,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    for table in tables:
        shape, problem, dtype = table.shape, table.problem, table_dtype(table.precision)
        if ref_key != (problem, shape):
            ref = y64 = z64 = None
            gc.collect()
            ref = make_reference(problem, shape.in_features, shape.out_features, seed=args.seed).to(args.device)
            state0 = {k: v.clone() for k, v in ref.state_dict().items()}
            ref_key = (problem, shape)
        if x_key != (shape, dtype):
            x = bench_input(shape, args.seed, table.precision).to(args.device)
            x_key = (shape, dtype)
        ref.load_state_dict(state0)
        ref.train(table.mode == "train")
        if y_key != (problem, shape, table.mode, dtype):
            y64 = z64 = None
            with torch.no_grad():  # the model and input of the table's dtype, exactly (16-bit: rounded)
                ref64 = copy.deepcopy(ref).to(dtype).double()
                x64 = x.double()
                y64 = ref64(x64)
                z64 = torch.nn.functional.linear(x64, ref64.gemm.weight, ref64.gemm.bias)
                del ref64, x64
            y_key = (problem, shape, table.mode, dtype)
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
                    times = time_round_robin(built, x, args.warmup, iters, rounds, hold_us=args.hold_us)
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
