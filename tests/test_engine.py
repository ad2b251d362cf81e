"""fusedlib.engine: which GEMM path (mainloop) runs a precision on a device, and the switch
that forces one."""
import pytest

from fusedlib import engine
from fusedlib.engine import UnsupportedPrecision, select_path

CAPABILITIES = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]


@pytest.fixture(autouse=True)
def no_switch(monkeypatch):
    monkeypatch.delenv(engine.ENV_VAR, raising=False)


@pytest.mark.parametrize("cap", CAPABILITIES)
def test_fp32_runs_simt_everywhere(cap):
    assert select_path("fp32", cap) == "simt"
    assert select_path("fp32", cap, k=70) == "simt"


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_tensor_core_paths_by_device_and_shape(precision):
    assert select_path(precision, (9, 0)) == "wgmma"
    assert select_path(precision, (9, 0), k=8192) == "wgmma"
    assert select_path(precision, (9, 0), k=70) == "mma"            # TMA needs K % 4 == 0
    assert select_path(precision, (9, 0), aligned=False) == "mma"   # and 16-byte aligned operands
    for cap in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0)):          # wgmma is sm_90a only
        assert select_path(precision, cap) == "mma", cap
    with pytest.raises(UnsupportedPrecision, match=r"8\.0"):
        select_path(precision, (7, 5))


@pytest.mark.parametrize("precision", ["fp32", "tf32", "3xtf32"])
def test_sixteen_bit_operands_run_the_tensor_cores_whatever_the_precision(precision, monkeypatch):
    """bf16/fp16 operands (docs/design.md §15): wgmma on sm_90a, mma.sync from 8.0 on, at every
    precision (their products are exact); never SIMT; refused below 8.0 and at K % 8 != 0, where
    the modules take the float32 kernels instead (sixteen_bit_kernels)."""
    assert select_path(precision, (9, 0), k=8192, sixteen_bit=True) == "wgmma"
    assert select_path(precision, (9, 0), k=8192, aligned=False, sixteen_bit=True) == "wgmma"  # the op copies
    for cap in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0)):
        assert select_path(precision, cap, k=64, sixteen_bit=True) == "mma", cap
    assert engine.sixteen_bit_kernels((8, 0), 64) and engine.sixteen_bit_kernels((9, 0), 8)
    assert not engine.sixteen_bit_kernels((7, 5), 64) and not engine.sixteen_bit_kernels((9, 0), 68)
    with pytest.raises(UnsupportedPrecision, match=r"8\.0 or later and in_features % 8"):
        select_path(precision, (7, 5), k=64, sixteen_bit=True)
    with pytest.raises(UnsupportedPrecision, match="in_features=68"):
        select_path(precision, (9, 0), k=68, sixteen_bit=True)
    monkeypatch.setenv(engine.ENV_VAR, "mma")
    assert select_path(precision, (9, 0), k=64, sixteen_bit=True) == "mma"
    monkeypatch.setenv(engine.ENV_VAR, "simt")
    with pytest.raises(UnsupportedPrecision, match="bf16/fp16 operands run on mma"):
        select_path(precision, (9, 0), k=64, sixteen_bit=True)
    monkeypatch.setenv(engine.ENV_VAR, "wgmma")
    with pytest.raises(UnsupportedPrecision, match=r"sm_90a"):
        select_path(precision, (8, 0), k=64, sixteen_bit=True)


def test_forced_paths(monkeypatch):
    monkeypatch.setenv(engine.ENV_VAR, "mma")
    assert engine.forced_path() == "mma"
    assert select_path("tf32", (9, 0)) == "mma"
    assert select_path("3xtf32", (9, 0), k=8192) == "mma"
    with pytest.raises(UnsupportedPrecision, match="tf32/3xtf32 only"):
        select_path("fp32", (9, 0))                                  # mma has no fp32
    monkeypatch.setenv(engine.ENV_VAR, "wgmma")
    assert select_path("tf32", (9, 0)) == "wgmma"
    with pytest.raises(UnsupportedPrecision, match=r"9\.0"):
        select_path("tf32", (8, 0))
    with pytest.raises(UnsupportedPrecision, match=r"9\.0"):
        select_path("tf32", (10, 0))
    with pytest.raises(UnsupportedPrecision, match="in_features % 4"):
        select_path("tf32", (9, 0), k=70)
    monkeypatch.setenv(engine.ENV_VAR, "simt")
    assert select_path("fp32", (9, 0)) == "simt"
    with pytest.raises(UnsupportedPrecision, match="fp32 only"):
        select_path("tf32", (9, 0))
    monkeypatch.setenv(engine.ENV_VAR, " AUTO ")
    assert engine.forced_path() == "auto" and select_path("tf32", (9, 0)) == "wgmma"
    monkeypatch.setenv(engine.ENV_VAR, "")
    assert engine.forced_path() == "auto"


def test_forced_argument_overrides_the_environment(monkeypatch):
    monkeypatch.setenv(engine.ENV_VAR, "wgmma")
    assert select_path("tf32", (9, 0), forced="mma") == "mma"
    assert select_path("tf32", (8, 6), forced="auto") == "mma"


def test_bad_names_are_value_errors(monkeypatch):
    with pytest.raises(ValueError, match="precision"):
        select_path("fp16", (9, 0))
    with pytest.raises(ValueError, match=engine.ENV_VAR):
        select_path("tf32", (9, 0), forced="cutlass")
    monkeypatch.setenv(engine.ENV_VAR, "tensorcores")
    with pytest.raises(ValueError, match="tensorcores"):
        engine.forced_path()
    with pytest.raises(ValueError, match=engine.ENV_VAR):
        select_path("fp32", (9, 0))
    assert not issubclass(UnsupportedPrecision, ValueError)          # two different failures


def test_path_codes_follow_the_kernel_order():
    """PATH_CODE is what the host passes to the kernels: the values of fl::GemmPath."""
    import re

    from fusedlib.build import KERNEL_DIR
    assert engine.PATHS == ("simt", "mma", "wgmma")
    text = "\n".join(p.read_text() for p in sorted(KERNEL_DIR.glob("*.cu*")))
    found = re.search(r"enum\s+GemmPath\s*\{([^}]*)\}", text)
    assert found, "fusedlib/kernels declares no enum GemmPath"
    codes = dict(re.findall(r"PATH_(\w+)\s*=\s*(\d+)", found.group(1)))
    assert {name.lower(): int(code) for name, code in codes.items()} == engine.PATH_CODE
