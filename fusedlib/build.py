"""Just-in-time build of the stage kernels with ``torch.utils.cpp_extension.load_inline``.

Each stage is one CUDA file in ``fusedlib/kernels`` (``01_naive.cu`` … ``04_fused.cu``)
that composes the shared headers (:data:`HEADERS`: the GEMM engine's mainloops and
epilogues, the shared passes). A stage is compiled on its first use (never at import),
with ninja, for the current device's compute capability (``sm_90a`` on Hopper), into a
cache directory that persists across processes. The extension's name carries a SHA-256 of
every kernel source, so editing any of them triggers a rebuild. Every source compiles for
each of :data:`ARCHS` (checked by ``tests/test_kernels_compile.py`` with nvcc).
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
#: Shared headers, from the bottom layer up (docs/design.md §8).
HEADERS = ("common.cuh", "epilogue.cuh", "gemm_simt.cuh", "gemm_mma.cuh", "gemm_wgmma.cuh", "gemm.cuh",
           "passes.cuh")
#: Compute capabilities every kernel source must compile for: Turing, Ampere (A100, RTX 30),
#: Ada (L4, RTX 40), Hopper (sm_90a), Blackwell (B200, RTX 50).
ARCHS = ((7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0))
STAGE_FILES = {"naive": "01_naive.cu", "fold": "02_fold.cu", "sums": "03_sums.cu", "fused": "04_fused.cu"}
#: The fused train-mode backward's kernels, shared by every stage (:func:`load_backward`).
BACKWARD_FILE = "backward.cu"

#: The operator's host side, compiled after each stage file (argument checks, workspace,
#: launch; registers the stage's CUDA kernel of ``torch.ops.fusedlib.<stage>``), the
#: backward's, compiled after :data:`BACKWARD_FILE`, and the helpers both include.
HOST = "torch_op.cuh"
BACKWARD_HOST = "torch_backward.cuh"
HOST_COMMON = "torch_common.cuh"
#: Data parallelism's collectives, included by HOST_COMMON (plain C++: tests/test_collectives.py
#: builds it alone for the CPU).
HOST_COLLECTIVES = "torch_collectives.cuh"
_BACKWARD_DECL = ("std::vector<at::Tensor> backward_passes(const at::Tensor& dy, const at::Tensor& y, "
                  "const at::Tensor& z, const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta, "
                  "c10::string_view kind, double eps, bool split);\n"
                  "std::vector<at::Tensor> backward_passes_group(const at::Tensor& dy, const at::Tensor& y, "
                  "const at::Tensor& z, const at::Tensor& scale, const at::Tensor& gamma, const at::Tensor& beta, "
                  "c10::string_view kind, double eps, bool split, const at::Tensor& x, const at::Tensor& stats, "
                  "const std::string& group_name);\n"
                  "at::Tensor centered_x(const at::Tensor& x, bool split);\n"
                  "at::Tensor centered_x_about(const at::Tensor& x, bool split, const at::Tensor& total);\n"
                  "at::Tensor tf32_parts(const at::Tensor& w);\n"
                  "std::vector<at::Tensor> backward_sixteen(const at::Tensor& dy, const at::Tensor& y, "
                  "const at::Tensor& z, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale, "
                  "const at::Tensor& gamma, const at::Tensor& beta, c10::string_view kind, double eps, bool need_dx);")


class KernelBuildError(RuntimeError):
    """The kernels could not be built or there is no CUDA device to build them for."""


def source_files(kernel_dir: Path | None = None) -> list[Path]:
    """Every kernel source: the shared headers, the stage files in stage order, the backward,
    the operators' host sides (in ``kernel_dir``, default the package's :data:`KERNEL_DIR`)."""
    files = [*HEADERS, *STAGE_FILES.values(), BACKWARD_FILE, HOST_COLLECTIVES, HOST_COMMON, HOST, BACKWARD_HOST]
    return [Path(kernel_dir or KERNEL_DIR) / f for f in files]


def copy_kernels(dest: Path) -> Path:
    """A copy of every kernel source in folder ``dest`` (made if missing), to edit and build with
    ``load_stage(..., kernel_dir=dest)`` (the course's exercise on epilogues). Returns ``dest``."""
    import shutil
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for path in source_files():
        shutil.copy2(path, dest / path.name)
    return dest


def sources_sha256(root: Path | None = None) -> dict[str, str]:
    """Map each kernel source path (relative to ``root``, default the repository root) to its SHA-256."""
    root = root or KERNEL_DIR.parent.parent
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in source_files()}


def stale_sources(recorded: dict[str, str], root: Path | None = None) -> list[str]:
    """The kernel sources whose current SHA-256 differs from ``recorded`` (a
    :func:`sources_sha256` map saved beside GPU results), or that it does not cover, sorted.
    Empty: the results were measured on the current kernels."""
    current = sources_sha256(root)
    return sorted(f for f, digest in current.items() if recorded.get(f) != digest)


def cache_dir() -> Path:
    """Where built extensions are cached: ``$FUSEDLIB_CACHE``, else torch's extension root
    (``$TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``) / fusedlib."""
    if os.environ.get("FUSEDLIB_CACHE"):
        return Path(os.environ["FUSEDLIB_CACHE"])
    from torch.utils.cpp_extension import get_default_build_root
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / "fusedlib"


def arch_flags(capability: tuple[int, int]) -> list[str]:
    """nvcc target for a compute capability: the arch-specific ``sm_90a`` on Hopper (9.0)."""
    cc = f"{capability[0]}{capability[1]}" + ("a" if capability == (9, 0) else "")
    return [f"-gencode=arch=compute_{cc},code=sm_{cc}"]


def _load(unit: str, cuda_src: str, decl: str, functions: list[str] | None, device_index: int, defines: list[str],
          kernel_dir: Path | None = None):
    """Build (or load from the cache) one extension: ``cuda_src`` compiled with ninja for
    the device's compute capability, exporting ``functions`` (declared by ``decl``) through
    pybind11; None: ``cuda_src`` defines the Python module itself."""
    import torch
    if not torch.cuda.is_available():
        raise KernelBuildError("fusedlib kernels need a CUDA device; none is available "
                               "(on the CPU the modules run the stage algebra instead)")
    from torch.utils.cpp_extension import load_inline

    capability = torch.cuda.get_device_capability(device_index)
    digest = hashlib.sha256()
    for path in source_files(kernel_dir):
        digest.update(path.read_bytes())
    digest.update(decl.encode())
    cuda_flags = ["-O3", *defines, *arch_flags(capability)]
    digest.update(" ".join(cuda_flags).encode())
    name = f"fusedlib_{unit}_{digest.hexdigest()[:16]}"
    build_dir = cache_dir() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    from . import ops  # noqa: F401  the schemas the extensions register their CUDA kernels for
    try:
        return load_inline(
            name=name, cpp_sources=decl, cuda_sources=cuda_src, functions=functions,
            extra_cuda_cflags=cuda_flags,
            extra_include_paths=[str(kernel_dir or KERNEL_DIR)], build_directory=str(build_dir), verbose=False)
    except Exception as exc:  # compiler or linker failure: keep the log, say where it is
        log = build_dir / "build.log"
        log.write_text(str(exc))
        raise KernelBuildError(f"building the {unit!r} kernels failed; compiler log: {log}") from exc


@functools.lru_cache(maxsize=None)
def load_stage(stage: str, device_index: int = 0, kernel_dir: Path | None = None):
    """Build (or load from the cache) the extension of ``stage`` and return it.

    Loading it registers the stage's CUDA kernel of ``torch.ops.fusedlib.<stage>``
    (:mod:`fusedlib.ops`); the extension's one Python function, ``eager_forward``, is the
    modules' way to the same C++ function without the dispatcher
    (:func:`fusedlib.cuda.eager_forward`).

    ``kernel_dir``: build from an edited copy of the sources (:func:`copy_kernels`) instead of
    the package's: a separate extension (its own cache entry); call its ``eager_forward``
    directly (loading it also re-registers the operator's CUDA kernel, which the package's
    stays the modules' way).

    Raises:
        ValueError: unknown stage.
        KernelBuildError: no CUDA device, or compilation failed (the message names the log file).
    """
    if stage not in STAGE_FILES:
        raise ValueError(f"stage: expected one of {tuple(STAGE_FILES)}, got {stage!r}")
    cuda_src = f'#include "{STAGE_FILES[stage]}"\n#include "{HOST}"\n'
    return _load(stage, cuda_src, "", None, device_index, [f"-DFL_STAGE={stage}"], kernel_dir)


@functools.lru_cache(maxsize=None)
def load_backward(device_index: int = 0):
    """Build (or load from the cache) the fused backward's extension and return it; it
    exposes ``backward_passes(dy, y, z, scale, gamma, beta, kind, eps, split)`` (the three
    kernels of ``backward.cu`` before the GEMMs; :mod:`fusedlib.ops` documents the result)
    ``centered_x(x, split)``: X − x̄ (1, N, K), or with ``split`` its TF32 parts (2, N, K); and
    ``tf32_parts(w)``: W's TF32 parts (2, M, K) (:func:`fusedlib.algebra.tf32_split`), the W
    operand of 3xTF32's dX. Data parallelism (docs/design.md §14): ``backward_passes_group``
    (the same passes in two phases around one all-reduce over a process group) and
    ``centered_x_about`` (X − x̄ about the ranks' x̄), see ``fusedlib/kernels/torch_backward.cuh``.

    Raises:
        KernelBuildError: no CUDA device, or compilation failed (the message names the log file).
    """
    cuda_src = f'#include "{BACKWARD_FILE}"\n#include "{BACKWARD_HOST}"\n'
    return _load("backward", cuda_src, _BACKWARD_DECL, ["backward_passes", "backward_passes_group", "centered_x",
                                                        "centered_x_about", "tf32_parts", "backward_sixteen"],
                 device_index, [])


def compile_check(path: Path, capability: tuple[int, int] = (9, 0), nvcc: str = "nvcc") -> list[dict]:
    """Compile one kernel source with ``nvcc -c`` (no torch headers needed) for ``capability``,
    with the flags torch's extension build gives nvcc (``COMMON_NVCC_FLAGS``: among them
    ``__CUDA_NO_HALF_CONVERSIONS__`` and ``__CUDA_NO_BFLOAT16_CONVERSIONS__``, which remove the
    implicit conversions between float and the 16-bit types, so code that compiles here
    compiles in :func:`load_stage` too), and return ptxas's resource report, one dict per kernel and per device function a kernel
    calls (not inlined): ``kernel`` (mangled name),
    ``registers``, ``spill_stores``, ``spill_loads`` (bytes), ``stack_frame`` (bytes).

    Raises:
        KernelBuildError: nvcc is missing or the compilation failed (message holds its output).
    """
    import re
    import shutil
    import subprocess
    import tempfile

    if shutil.which(nvcc) is None:
        raise KernelBuildError(f"{nvcc} not found on PATH: cannot compile {path.name}")
    with tempfile.TemporaryDirectory() as tmp:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

        cmd = [nvcc, "-c", "-O3", "-std=c++17", *COMMON_NVCC_FLAGS, *arch_flags(capability), "-Xptxas", "-v",
               "-I", str(KERNEL_DIR), "-o", str(Path(tmp) / "k.o"), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelBuildError(f"nvcc failed on {path.name}:\n{proc.stderr}")
    report, current, target = [], None, None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = {"kernel": m.group(1), "registers": 0, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0}
            report.append(current)
            continue
        if current is None:
            continue
        m = re.search(r"Function properties for (\w+)", line)
        if m:  # the kernel's own line, or a device function it calls (reported as a row of its own)
            target = current
            if m.group(1) != current["kernel"]:
                target = {"kernel": m.group(1), "registers": 0, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0}
                report.append(target)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and target is not None:
            target["stack_frame"], target["spill_stores"], target["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
    return report
