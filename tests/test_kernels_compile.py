"""Every kernel source (the four stage files and the backward's) compiles with nvcc for every
GPU generation of ``build.ARCHS`` (sm_75, 80, 86, 89, 90a, 100, 120), without torch headers,
and no kernel spills registers to local memory. Runs on machines without a GPU (compile only); in CI a missing nvcc fails.

``make test-kernels`` runs this file (``make test`` leaves it out: the matrix is minutes of
nvcc). The compiles of the whole matrix run side by side, one nvcc per core
(:func:`reports`, ``$FUSEDLIB_COMPILE_JOBS`` sets the number), the tests then read their
results."""
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from fusedlib import build

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CI"),
                                reason="nvcc not on PATH (required in CI)")


def _arch(cap):
    return f"sm_{cap[0]}{cap[1]}" + ("a" if cap == (9, 0) else "")


#: The kernel sources of the matrix: each stage's file, and the train backward's (its own extension).
SOURCES = {**build.STAGE_FILES, "backward": build.BACKWARD_FILE}


def _compile(stage, capability):
    """ptxas's report of one kernel source (SOURCES) for one architecture, or the exception raised."""
    try:
        return build.compile_check(build.KERNEL_DIR / SOURCES[stage], capability)
    except Exception as exc:  # re-raised by the test of this pair
        return exc


def _selected_pairs(items) -> list:
    """The (stage, capability) pairs the selected tests of this file read (``-k`` narrows them)."""
    pairs = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "stage" in params and "capability" in params:
            pairs.append((params["stage"], params["capability"]))
        elif item.name == "test_every_stage_instantiates_every_mainloop":
            pairs += [(stage, (9, 0)) for stage in build.STAGE_FILES]
    return list(dict.fromkeys(pairs))


@pytest.fixture(scope="module")
def reports(request):
    """(stage, capability) -> ptxas report (or the exception) for the selected pairs of the
    matrix, compiled in threads that each wait on one nvcc process."""
    pairs = _selected_pairs(request.session.items)
    jobs = int(os.environ.get("FUSEDLIB_COMPILE_JOBS") or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(zip(pairs, pool.map(lambda pair: _compile(*pair), pairs)))


@needs_nvcc
@pytest.mark.parametrize("capability", build.ARCHS, ids=_arch)
@pytest.mark.parametrize("stage", list(SOURCES))
def test_stage_compiles_without_spills(stage, capability, reports):
    report = reports[(stage, capability)]
    if isinstance(report, Exception):
        raise report
    assert report, f"ptxas reported no kernels for {stage} on {_arch(capability)}"
    for k in report:
        print(f"{stage:6s} {_arch(capability):7s} {k['registers']:4d} regs  "
              f"spill {k['spill_stores']}/{k['spill_loads']} B  {k['kernel']}")
    spilled = [k["kernel"] for k in report if k["spill_stores"] or k["spill_loads"] or k["stack_frame"]]
    assert not spilled, f"kernels with local-memory traffic in {stage} on {_arch(capability)}: {spilled}"


@needs_nvcc
def test_every_stage_instantiates_every_mainloop(reports):
    """On sm_90a each stage file holds the three mainloops (one GEMM engine under every
    stage); on sm_80 the wgmma kernels exist with empty bodies, on sm_75 the mma ones too."""
    for stage in build.STAGE_FILES:
        report = reports[(stage, (9, 0))]
        if isinstance(report, Exception):
            raise report
        names = " ".join(k["kernel"] for k in report)
        for mainloop in ("simt_gemm_kernel", "mma_gemm_kernel", "wgmma_gemm_kernel"):
            assert mainloop in names, f"{stage}: no {mainloop}"


def test_compile_error_is_reported(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k() { this is not cuda; }\n")
    with pytest.raises(build.KernelBuildError, match="bad.cu"):
        build.compile_check(bad)


def test_no_cuda_device_is_a_clear_build_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(build.KernelBuildError, match="need a CUDA device"):
        build.load_stage("fused")
    with pytest.raises(ValueError, match="stage"):
        build.load_stage("fastest")
