"""``python -m fusedlib info``: the software and hardware this machine offers fusedlib.

Prints one ``key  value`` line each: python, torch (and the CUDA version it was built
with), whether CUDA is available, the device name and compute capability; then, for each
precision (fp32, tf32, 3xtf32), the GEMM path (mainloop) it runs on this device, as
:func:`fusedlib.engine.select_path` chooses it, or why it cannot run here (without CUDA:
"no CUDA device: CPU stage algebra"); the switch that forces a path
(``FUSEDLIB_GEMM_PATH`` and its value);
the nvcc version (``nvcc --version``, or "not found" when nvcc is not on PATH) and the
kernel build cache.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path


def add_arguments(parser) -> None:
    """``info`` takes no options."""
    return None


def build_cache_dir() -> Path:
    """Where the CUDA kernels are built and cached: :func:`fusedlib.build.cache_dir`; without
    that module, torch's extension root (``$TORCH_EXTENSIONS_DIR`` or
    ``~/.cache/torch_extensions``) / fusedlib."""
    try:
        from .build import cache_dir
    except ImportError:
        root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
        return Path(root) / "fusedlib"
    return Path(cache_dir())


def nvcc_version() -> str:
    """The release line of ``nvcc --version`` with nvcc's path, or ``"not found"``."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return "not found"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{nvcc} (does not run: {exc})"
    lines = out.strip().splitlines()
    release = next((ln for ln in lines if "release" in ln), lines[-1] if lines else "unknown version")
    return f"{release.strip()} ({nvcc})"


def gemm_paths(capability: tuple[int, int] | None) -> dict[str, str]:
    """One line per precision: the GEMM path it runs on a device of ``capability``.

    Args:
        capability: (major, minor) of the CUDA device, or None without one.

    Returns:
        dict, in print order: ``"GEMM <precision>"`` for fp32, tf32 and 3xtf32 ->
        the path :func:`fusedlib.engine.select_path` picks (``simt``, ``mma`` or
        ``wgmma``), followed by the path of in_features % 4 != 0 where that differs
        (``"wgmma (mma where in_features % 4 != 0)"`` on an H100);
        ``"unsupported: <reason>"`` where it raises
        :class:`~fusedlib.engine.UnsupportedPrecision`; ``"invalid switch: <reason>"``
        where ``FUSEDLIB_GEMM_PATH`` names no path (ValueError); "no CUDA device: CPU
        stage algebra" when ``capability`` is None. Then ``"GEMM path switch"`` ->
        ``FUSEDLIB_GEMM_PATH=<value>`` or ``FUSEDLIB_GEMM_PATH unset``, and its choices.
        Nothing is raised.
    """
    from . import engine
    from .algebra import PRECISIONS
    lines = {}
    for precision in PRECISIONS:
        if capability is None:
            lines[f"GEMM {precision}"] = "no CUDA device: CPU stage algebra"
            continue
        try:
            path = engine.select_path(precision, capability)
            try:
                odd = engine.select_path(precision, capability, k=3)
            except engine.UnsupportedPrecision:
                odd = "unsupported"
            lines[f"GEMM {precision}"] = path if odd == path else f"{path} ({odd} where in_features % 4 != 0)"
        except engine.UnsupportedPrecision as exc:
            lines[f"GEMM {precision}"] = f"unsupported: {_short(str(exc))}"
        except ValueError as exc:
            lines[f"GEMM {precision}"] = f"invalid switch: {_short(str(exc))}"
    value = os.environ.get(engine.ENV_VAR)
    choices = f"{', '.join(engine.PATHS[:-1])} or {engine.PATHS[-1]} forces that path; auto or unset: the fastest"
    lines["GEMM path switch"] = (f"{engine.ENV_VAR} unset ({choices})" if value is None
                                 else f"{engine.ENV_VAR}={value} ({choices})")
    return lines


def _short(text: str, limit: int = 140) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def collect() -> dict[str, str]:
    """Python, torch, CUDA availability, device and capability, the GEMM path of each
    precision and the switch, nvcc and the build cache.

    Returns:
        dict of display name -> value, all strings, in print order.
    """
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch CUDA": torch.version.cuda or "none (CPU build)",
        "CUDA available": "yes" if torch.cuda.is_available() else "no",
        "CUDA device": "none: the modules run the CPU stage algebra",
    }
    cap = None
    if torch.cuda.is_available():
        cap = tuple(torch.cuda.get_device_capability())
        info["CUDA device"] = f"{torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})"
    info.update(gemm_paths(cap))
    info["nvcc"] = nvcc_version()
    info["build cache"] = str(build_cache_dir())
    return info


def main(args) -> int:
    """Print :func:`collect`'s lines; exit status 0."""
    for key, value in collect().items():
        print(f"{key:16s} {value}")
    return 0
