"""``python -m fusedlib``: check's JSON contract and exit status, info, argument errors."""
import json
import subprocess
import sys

import pytest

from fusedlib import cli


def test_check_json_contract(capsys):
    rc = cli.main(["check", "--device", "cpu", "--problem", "84,33", "--stage", "sums,fused",
                   "--mode", "all", "--shape", "7x33->65", "--seeds", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    # 2 problems × (sums fp32, fused fp32/tf32/3xtf32) × 2 modes × 2 seeds (rand, randn inputs)
    assert len(out["cases"]) == 2 * 4 * 2 * 2
    for case in out["cases"]:
        for key in ("problem", "stage", "mode", "precision", "shape", "seed", "max_abs_err", "rel_err", "passed"):
            assert key in case
        assert case["passed"] is True and case["shape"] == "7x33->65"


def test_check_table_and_summary(capsys):
    rc = cli.main(["check", "--problem", "39", "--stage", "naive", "--mode", "eval", "--shape", "2x64->3",
                   "--seeds", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 passed, 0 failed" in out and "naive" in out


@pytest.mark.parametrize("argv,message", [
    (["check", "--stage", "naive", "--precision", "tf32"], "applies to stage 'fused' only"),
    (["check", "--stage", "naive,fused", "--precision", "tf32"], "--stage naive runs fp32 only"),
    (["check", "--stage", "sums", "--precision", "fp32,3xtf32"], "--precision 3xtf32 applies to stage 'fused'"),
    (["check", "--mode", "inference"], "--mode"),
    (["check", "--seeds", "0"], "--seeds"),
    (["check", "--problem", "85"], "--problem"),
    (["check", "--shape", "12x3"], "shape"),
    (["check", "--inputs", "uniform"], "--inputs"),
])
def test_check_argument_errors_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_check_cuda_without_device_exits_2(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(["check", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_precision_all_is_fp32_everywhere_and_tensor_cores_for_fused(capsys):
    rc = cli.main(["check", "--problem", "84", "--mode", "train", "--shape", "2x64->3", "--seeds", "1", "--json"])
    pairs = {(c["stage"], c["precision"]) for c in json.loads(capsys.readouterr().out)["cases"]}
    assert rc == 0
    assert pairs == {("naive", "fp32"), ("fold", "fp32"), ("sums", "fp32"), ("fused", "fp32"),
                     ("fused", "tf32"), ("fused", "3xtf32")}


def test_check_exit_status_1_on_a_failing_case(monkeypatch, capsys):
    from fusedlib import algebra
    original = algebra.stage_forward
    monkeypatch.setattr(algebra, "stage_forward", lambda *a, **k: original(*a, **k) * 1.001)
    rc = cli.main(["check", "--problem", "33", "--stage", "fold", "--mode", "train", "--shape", "7x33->65",
                   "--seeds", "1"])
    assert rc == 1 and "0 passed, 1 failed" in capsys.readouterr().out


def test_info_in_process(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for key in ("python", "torch", "CUDA available", "CUDA device", "nvcc", "build cache"):
        assert key in out
    from fusedlib import info
    assert str(info.build_cache_dir()) in out


def test_info_build_cache_without_the_build_module(monkeypatch, tmp_path):
    import sys
    from fusedlib import info
    monkeypatch.setitem(sys.modules, "fusedlib.build", None)   # import fails: the fallback
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert info.build_cache_dir() == tmp_path / "fusedlib"
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert info.build_cache_dir() == tmp_path / ".cache" / "torch_extensions" / "fusedlib"


def test_info_runs_as_module():
    proc = subprocess.run([sys.executable, "-m", "fusedlib", "info"], capture_output=True, text=True)
    assert proc.returncode == 0
    for key in ("python", "torch", "CUDA device", "nvcc", "build cache"):
        assert key in proc.stdout
