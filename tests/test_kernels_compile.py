"""Every kernel source compiles for sm_90a with nvcc, without torch headers, and no kernel
spills registers to local memory. Runs on machines without a GPU (compile only)."""
import os
import shutil

import pytest

from fusedlib import build

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CI"),
                                reason="nvcc not on PATH (required in CI)")


@needs_nvcc
@pytest.mark.parametrize("stage", list(build.STAGE_FILES))
def test_stage_compiles_without_spills(stage):
    report = build.compile_check(build.KERNEL_DIR / build.STAGE_FILES[stage])
    assert report, f"ptxas reported no kernels for {stage}"
    for k in report:
        print(f"{stage:6s} {k['registers']:4d} regs  spill {k['spill_stores']}/{k['spill_loads']} B  {k['kernel']}")
    spilled = [k["kernel"] for k in report if k["spill_stores"] or k["spill_loads"] or k["stack_frame"]]
    assert not spilled, f"kernels with local-memory traffic in {stage}: {spilled}"


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
