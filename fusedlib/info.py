"""``python -m fusedlib info``: the software and hardware this machine offers fusedlib.

Prints one ``key  value`` line each: python, torch (and the CUDA version it was built
with), whether CUDA is available, the device name and compute capability, the nvcc version
(``nvcc --version``, or "not found" when nvcc is not on PATH) and the kernel build cache.
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


def collect() -> dict[str, str]:
    """Python, torch, CUDA availability, device and capability, nvcc and the build cache.

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
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        info["CUDA device"] = f"{torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})"
    info["nvcc"] = nvcc_version()
    info["build cache"] = str(build_cache_dir())
    return info


def main(args) -> int:
    """Print :func:`collect`'s lines; exit status 0."""
    for key, value in collect().items():
        print(f"{key:15s} {value}")
    return 0
