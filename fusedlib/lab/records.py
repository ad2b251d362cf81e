"""The benchmark's records: the bench.csv and profile.csv contracts (:data:`COLUMNS`,
:data:`PROFILE_COLUMNS`), one row from one measurement (:func:`make_row`), appending rows
under a checked header, the environment a row names (device, torch, CUDA, commit), the
results folder of a device (:func:`gpu_slug`) and the kernel sources' stamp
(``sources.json``) beside a CSV.
"""
from __future__ import annotations

import csv
import datetime
import json
import subprocess
from pathlib import Path

from ..reference import Shape, problem_kind

#: The bench.csv contract, in order.
COLUMNS = ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl", "median_ms",
           "min_ms", "max_ms", "iters", "tflops", "gbytes_per_s", "rel_err", "gpu", "torch", "cuda", "commit",
           "timestamp", "host_us", "device_ms"]
#: The profile.csv contract: torch.profiler's device time per kernel and call; the last two
#: columns are Nsight Compute's DRAM bytes per call and SM throughput (% of peak), empty
#: unless measured (``--ncu``).
PROFILE_COLUMNS = ["problem", "shape", "mode", "precision", "impl", "kernel", "calls", "cuda_time_us_per_call",
                   "dram_bytes_per_call", "sm_throughput_pct"]
#: The folder holding the fusedlib package: ``git rev-parse`` runs there (read only) to name
#: the commit a row was measured on.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent


#: The GPU whose committed results the project shows (``results/<RESULTS_GPU>/``: the README,
#: the figures and the notebooks): the one whose records match the current kernel sources.
RESULTS_GPU = "h200"
#: The folder of the engine's development on the H100: its notes and raw logs (``NOTES.md``,
#: ``logs/``) and the tables curated from them (``*.csv``, ``README.md``), read by the appendix's
#: history plots and Nsight Compute tables.
NOTES_GPU = "h100"


def gpu_slug(name: str) -> str:
    """Results folder name of a device: ``h100`` if the name contains H100, ``h200`` for H200,
    ``a100`` for A100, else its lower-case letters and digits (``gpu`` if none)."""
    low = name.lower()
    for slug in ("h100", "h200", "a100"):
        if slug in low:
            return slug
    return "".join(ch for ch in low if ch.isalnum()) or "gpu"


def _environment(device: str = "cuda") -> dict:
    """gpu (device name), torch, cuda (torch's CUDA version) and commit (the ``FUSEDLIB_COMMIT``
    environment variable when set — for copies of the tree whose ``.git`` is not the one the
    code was committed in, such as a remote GPU machine's —, else the short HEAD with
    ``-dirty`` appended when tracked files differ from it — a copy whose ``.git`` is stale shows
    that way instead of naming a commit it does not hold —, else "unknown")."""
    import os
    import platform

    import torch
    try:
        git = ["git", "-C", str(PACKAGE_PARENT)]
        proc = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        commit = proc.stdout.strip() if proc.returncode == 0 else ""
        if commit and subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                     capture_output=True, text=True).stdout.strip():
            commit += "-dirty"
    except OSError:
        commit = ""
    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu {platform.machine()}"
    return {"gpu": name, "torch": torch.__version__, "cuda": torch.version.cuda or "none",
            "commit": os.environ.get("FUSEDLIB_COMMIT") or commit or "unknown"}


def make_row(problem: str, shape: Shape, mode: str, precision: str, impl: str, times, iters: int,
             rel_error: float, env: dict) -> dict:
    """One bench.csv row (:data:`COLUMNS`). ``times`` = (median, min, max) in ms, optionally
    followed by the median host time per call in µs (``host_us``, empty without it) and the
    median device time in ms with the stream held while the host enqueues (``device_ms``:
    ``--hold-us``, :func:`fusedlib.lab.timing.time_round_robin`; empty without it); ``tflops``
    (TFLOP/s) and ``gbytes_per_s`` (GB/s) are the cost model's FLOPs and compulsory bytes of
    ``impl`` divided by the median; ``timestamp`` is ISO-8601 UTC."""
    from .costmodel import cost
    median, lo, hi, *rest = times
    host, device = (rest + [None, None])[:2]
    c = cost(problem_kind(problem), impl, shape.batch, shape.in_features, shape.out_features, mode, precision)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"problem": str(problem), "batch": shape.batch, "in_features": shape.in_features,
            "out_features": shape.out_features, "mode": mode, "precision": precision, "impl": impl,
            "median_ms": _sig(median), "min_ms": _sig(lo), "max_ms": _sig(hi), "iters": iters,
            "tflops": _sig(c.flops / (median * 1e-3) / 1e12), "gbytes_per_s": _sig(c.bytes / (median * 1e-3) / 1e9),
            "rel_err": _sig(rel_error, 3), "gpu": env["gpu"], "torch": env["torch"], "cuda": env["cuda"],
            "commit": env["commit"], "timestamp": now, "host_us": "" if host is None else _sig(host, 4),
            "device_ms": "" if device is None else _sig(device)}


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
    from ..build import sources_sha256, stale_sources
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


def results_csv(out: Path | None, env: dict, name: str, columns, sources: str, fresh: bool) -> Path:
    """The CSV a lab command writes: ``out``, or ``results/<gpu>/<name>`` (:func:`gpu_slug` of
    ``env["gpu"]``); removed first with ``fresh``; its header checked (:func:`check_header`) and
    the kernel sources stamped beside it (:func:`stamp_sources`, record ``sources``).

    Raises:
        ValueError: a header other than ``columns``, or rows measured on other kernel sources.
    """
    out = out or Path("results") / gpu_slug(env["gpu"]) / name
    if fresh:
        out.unlink(missing_ok=True)
    check_header(out, columns)
    stamp_sources(out, sources)
    return out


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
