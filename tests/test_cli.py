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
    # 2 problems × (sums, fused) × (fp32, tf32, 3xtf32) × 2 modes × 2 seeds (rand, randn inputs)
    assert len(out["cases"]) == 2 * 2 * 3 * 2 * 2
    for case in out["cases"]:
        for key in ("problem", "stage", "mode", "precision", "shape", "seed", "max_abs_err", "rel_err", "passed"):
            assert key in case
        assert case["passed"] is True and case["shape"] == "7x33->65"


def test_check_table_and_summary(capsys):
    rc = cli.main(["check", "--problem", "39", "--stage", "naive", "--mode", "eval", "--shape", "2x64->3",
                   "--seeds", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "3 passed, 0 failed" in out and "naive" in out     # fp32, tf32, 3xtf32


@pytest.mark.parametrize("grad", [False, True])
def test_check_runs_an_eval_case_of_one_row(grad, capsys):
    """A batch of 1 in eval mode (BatchNorm's running statistics: the message for train mode
    suggests it) runs: the train steps before it take 2 rows."""
    rc = cli.main(["check", "--problem", "84", "--stage", "fused", "--precision", "fp32", "--mode", "eval",
                   "--shape", "1x16:8", "--seeds", "1", *(["--grad"] if grad else [])])
    assert rc == 0 and "1 passed, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["check", "--stage", "naive", "--precision", "bf16"], "--precision: expected 'all' or a comma list"),
    (["check", "--stage", "fastest"], "--stage: expected 'all' or a comma list"),
    (["check", "--mode", "inference"], "--mode"),
    (["check", "--seeds", "0"], "--seeds"),
    (["check", "--problem", "85"], "--problem"),
    (["check", "--shape", "12x3"], "shape"),
    (["check", "--inputs", "uniform"], "--inputs"),
    (["check", "--problem", "33", "--shape", "1x16:4"], "--shape: train mode needs a batch of at least 2"),
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


def test_precision_all_runs_every_stage_at_every_precision(capsys):
    rc = cli.main(["check", "--problem", "84", "--mode", "train", "--shape", "2x64->3", "--seeds", "1", "--json"])
    pairs = {(c["stage"], c["precision"]) for c in json.loads(capsys.readouterr().out)["cases"]}
    assert rc == 0
    assert pairs == {(s, p) for s in ("naive", "fold", "sums", "fused") for p in ("fp32", "tf32", "3xtf32")}


def test_tensor_core_precisions_for_a_single_stage(capsys):
    rc = cli.main(["check", "--problem", "33", "--stage", "naive", "--precision", "tf32,3xtf32", "--mode", "all",
                   "--shape", "257x100->99", "--seeds", "1", "--json"])
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert rc == 0 and len(cases) == 2 * 2 and all(c["passed"] for c in cases)
    assert {(c["stage"], c["precision"]) for c in cases} == {("naive", "tf32"), ("naive", "3xtf32")}
    tf32 = [c["rel_err"] for c in cases if c["precision"] == "tf32"]
    assert min(tf32) > 1e-5                                   # the GEMM did run in TF32


def test_check_exit_status_1_on_a_failing_case(monkeypatch, capsys):
    from fusedlib import algebra
    original = algebra.stage_forward
    monkeypatch.setattr(algebra, "stage_forward", lambda *a, **k: original(*a, **k) * 1.001)
    rc = cli.main(["check", "--problem", "33", "--stage", "fold", "--mode", "train", "--precision", "fp32",
                   "--shape", "7x33->65", "--seeds", "1"])
    assert rc == 1 and "0 passed, 1 failed" in capsys.readouterr().out


def test_info_in_process(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for key in ("python", "torch", "CUDA available", "CUDA device", "GEMM fp32", "GEMM tf32", "GEMM 3xtf32",
                "GEMM path switch", "FUSEDLIB_GEMM_PATH", "nvcc", "build cache"):
        assert key in out
    from fusedlib import info
    assert str(info.build_cache_dir()) in out
    import torch
    if not torch.cuda.is_available():
        assert out.count("no CUDA device: CPU stage algebra") == 3


def test_info_gemm_path_lines(monkeypatch):
    from fusedlib import info
    monkeypatch.delenv("FUSEDLIB_GEMM_PATH", raising=False)
    h100 = info.gemm_paths((9, 0))
    assert list(h100) == ["GEMM fp32", "GEMM tf32", "GEMM 3xtf32", "GEMM path switch"]
    assert h100["GEMM fp32"] == "simt"
    assert h100["GEMM tf32"] == h100["GEMM 3xtf32"] == "wgmma (mma where in_features % 4 != 0)"
    assert h100["GEMM path switch"].startswith("FUSEDLIB_GEMM_PATH unset")
    assert info.gemm_paths((8, 6))["GEMM tf32"] == "mma"
    turing = info.gemm_paths((7, 5))
    assert turing["GEMM fp32"] == "simt"
    assert turing["GEMM tf32"].startswith("unsupported:") and "8.0" in turing["GEMM tf32"]
    assert set(info.gemm_paths(None).values()) - {info.gemm_paths(None)["GEMM path switch"]} == {
        "no CUDA device: CPU stage algebra"}
    monkeypatch.setenv("FUSEDLIB_GEMM_PATH", "mma")
    forced = info.gemm_paths((9, 0))
    assert forced["GEMM tf32"] == "mma" and forced["GEMM fp32"].startswith("unsupported:")
    assert forced["GEMM path switch"].startswith("FUSEDLIB_GEMM_PATH=mma")
    monkeypatch.setenv("FUSEDLIB_GEMM_PATH", "fastest")
    bad = info.gemm_paths((9, 0))
    assert bad["GEMM fp32"].startswith("invalid switch:") and "fastest" in bad["GEMM fp32"]


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
    for key in ("python", "torch", "CUDA device", "GEMM tf32", "GEMM path switch", "nvcc", "build cache"):
        assert key in proc.stdout


def test_gpu_suite_runner_needs_cuda(capsys, tmp_path):
    """tests/run_gpu_suite.py (make check-gpu) says so without a CUDA device; its parts cover
    every test of tests/test_gpu.py's record."""
    import torch
    import run_gpu_suite
    selects = " ".join(k or "" for _, k in run_gpu_suite.PARTS.values())
    for name in ("case_matches", "offset_inputs", "gradients", "bit_identical", "sanitizer"):
        assert name in selects
    if not torch.cuda.is_available():
        assert run_gpu_suite.main(["--out", str(tmp_path)]) == 2
        assert "CUDA" in capsys.readouterr().err
    for part in ("large", "mixed", "kernelbench", "operator"):
        (tmp_path / f"{part}.json").write_text("{}")
    committed = tmp_path / "validation.json"
    # the whole suite joins every recorded part's file; --append the committed record, then the parts run now
    assert run_gpu_suite.parts_to_join(tmp_path, ["mixed"], committed, False) == [
        tmp_path / f"{p}.json" for p in run_gpu_suite.PARTS if p in ("large", "mixed", "kernelbench")]
    assert run_gpu_suite.parts_to_join(tmp_path, ["operator", "mixed", "kernelbench"], committed, True) == [
        committed, tmp_path / "mixed.json", tmp_path / "kernelbench.json"]
