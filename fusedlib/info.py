"""``python -m fusedlib info``: the software and hardware this machine offers fusedlib."""
from __future__ import annotations

import platform
import shutil
import subprocess


def add_arguments(parser) -> None:  # no options
    return None


def collect() -> dict:
    """Python, torch, CUDA device and capability, nvcc version and the kernel build cache.
    Returns a dict of strings."""
    import torch

    from .build import cache_dir
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch CUDA": torch.version.cuda or "none (CPU build)",
            "CUDA device": "none: the modules run the CPU stage algebra"}
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        info["CUDA device"] = f"{torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]})"
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        info["nvcc"] = f"{out[-1] if out else 'unknown'} ({nvcc})"
    else:
        info["nvcc"] = "not found"
    info["build cache"] = str(cache_dir())
    return info


def main(args) -> int:
    for key, value in collect().items():
        print(f"{key:12s} {value}")
    return 0
