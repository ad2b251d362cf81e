"""Benchmark harness parts that run without a GPU: CSV contracts, rows, plans, scoped TF32,
Nsight Compute parsing, and a dry run of the whole loop on the CPU stage algebra."""
import argparse
import contextlib
import csv

import pytest
import torch

from fusedlib import cli
from fusedlib.lab import bench
from fusedlib.reference import PRESETS, Shape, parse_shape

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0", "commit": "abc1234"}


def _args(*argv):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_columns_are_the_contract():
    assert bench.COLUMNS == ["problem", "batch", "in_features", "out_features", "mode", "precision", "impl",
                             "median_ms", "min_ms", "max_ms", "iters", "tflops", "gbytes_per_s", "rel_err",
                             "gpu", "torch", "cuda", "commit", "timestamp", "host_us", "device_ms"]
    assert bench.PROFILE_COLUMNS[:8] == ["problem", "shape", "mode", "precision", "impl", "kernel", "calls",
                                         "cuda_time_us_per_call"]


def test_gpu_slug():
    assert bench.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert bench.gpu_slug("NVIDIA H200") == "h200"
    assert bench.gpu_slug("Tesla V100-SXM2") == "teslav100sxm2"


def test_datasheet_follows_the_device():
    """The sheet of env.json's GPU (an H200 is not compared with the H100's bandwidth), else the
    one env.json carries, else none."""
    assert bench.datasheet({"gpu": "NVIDIA H200"})["bandwidth_gbytes_per_s"] == 4800.0
    assert bench.datasheet({"gpu": "NVIDIA H100 80GB HBM3", "datasheet": {"device": "x"}}) == bench.DATASHEET_H100
    assert bench.datasheet({"gpu": "Tesla V100-SXM2", "datasheet": {"device": "V100"}}) == {"device": "V100"}
    assert bench.datasheet(None) == {} and bench.datasheet({"gpu": "RTX"}) == {}


def test_row_follows_contract_and_cost_model(tmp_path):
    from fusedlib.lab.costmodel import cost
    shape = parse_shape("84")
    row = bench.make_row("84", shape, "train", "tf32", "fused", (0.5, 0.45, 0.6), 50, 3e-4, ENV)
    assert list(row) == bench.COLUMNS
    c = cost("84", "fused", 1024, 8192, 8192, "train", "tf32")
    assert row["tflops"] == pytest.approx(c.flops / 0.5e-3 / 1e12, rel=1e-5)      # ≈ 275 TFLOP/s
    assert row["gbytes_per_s"] == pytest.approx(c.bytes / 0.5e-3 / 1e9, rel=1e-5)
    assert (row["median_ms"], row["min_ms"], row["max_ms"], row["iters"]) == (0.5, 0.45, 0.6, 50)
    assert row["rel_err"] == 3e-4 and row["commit"] == "abc1234" and row["timestamp"].endswith("+00:00")


def test_append_keeps_one_header_and_validates(tmp_path):
    row = bench.make_row("84", parse_shape("84"), "train", "fp32", "fused", (1.0, 1.0, 1.0), 50, 1e-6, ENV)
    path = tmp_path / "bench.csv"
    bench.append_row(path, row)
    bench.append_row(path, {**row, "impl": "eager"})
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["impl"] for r in rows] == ["fused", "eager"]
    assert list(rows[0]) == bench.COLUMNS
    assert path.read_text().count("median_ms") == 1
    with pytest.raises(ValueError, match="columns"):
        bench.append_row(path, {"problem": "84"})
    with pytest.raises(ValueError, match="columns"):       # right keys, wrong order
        bench.append_row(path, dict(reversed(list(row.items()))))
    old = tmp_path / "old.csv"
    old.write_text("problem,impl,ms\n84,fused,1.0\n")
    with pytest.raises(ValueError, match="--fresh"):        # an older contract is not appended to
        bench.append_row(old, row)


def test_peer_precision_is_scoped_and_restored():
    def flags():
        return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    before = flags()
    with bench.peer_precision("tf32"):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert flags() == before
    with bench.peer_precision("fp32"):
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert flags() == before
    with pytest.raises(RuntimeError):
        with bench.peer_precision("tf32"):
            raise RuntimeError("boom")
    assert flags() == before
    torch.backends.cuda.matmul.allow_tf32 = True            # a caller that had TF32 on keeps it
    try:
        with bench.peer_precision("fp32"):
            assert not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before[0]


def test_what_runs_at_each_precision():
    assert [i for i in bench.IMPLS if bench.available(i, "fp32")] == list(bench.IMPLS)
    assert [i for i in bench.IMPLS if bench.available(i, "tf32")] == list(bench.IMPLS)
    assert [i for i in bench.IMPLS if bench.available(i, "3xtf32")] == ["naive", "fold", "sums", "fused"]
    for dtype in ("bf16", "fp16"):           # a dtype: every implementation runs in it
        assert [i for i in bench.IMPLS if bench.available(i, dtype)] == list(bench.IMPLS)
    with pytest.raises(ValueError, match="precision"):
        bench.available("fused", "fp8")


def test_precision_names_and_groups():
    """all keeps its meaning (fp32, tf32, 3xtf32: make results unchanged); 16bit is bf16, fp16;
    lists mix them, in a fixed order."""
    assert bench.parse_precisions("all") == ["fp32", "tf32", "3xtf32"]
    assert bench.parse_precisions("16bit") == ["bf16", "fp16"]
    assert bench.parse_precisions("fp16,fp32") == ["fp32", "fp16"]
    assert bench.parse_precisions("all,16bit") == ["fp32", "tf32", "3xtf32", "bf16", "fp16"]
    assert bench._selection(_args())[3] == ["fp32", "tf32", "3xtf32"]
    with pytest.raises(ValueError, match="16bit"):
        bench.parse_precisions("bf8")
    assert bench.table_dtype("bf16") == torch.bfloat16 and bench.table_dtype("fp16") == torch.float16
    assert bench.table_dtype("3xtf32") == torch.float32
    x = bench.bench_input(parse_shape("5x8:3"), 0, "bf16")
    assert x.dtype == torch.bfloat16 and torch.equal(x, bench.bench_input(parse_shape("5x8:3")).bfloat16())


def test_16bit_plan_and_list(capsys):
    tables = bench.plan_tables(*bench._selection(_args("--problem", "84,33,39", "--precision", "16bit")))
    assert {t.precision for t in tables} == {"bf16", "fp16"}
    assert all(t.impls == bench.IMPLS for t in tables)
    keys = {(t.problem, t.shape, t.mode, t.precision) for t in tables}
    for problem in ("84", "33", "39"):
        for mode in ("train", "eval"):
            assert (problem, PRESETS[problem], mode, "bf16") in keys and (problem, PRESETS[problem], mode, "fp16") in keys
    assert cli.main(["bench", "--list", "--problem", "84", "--shape", "84", "--mode", "train", "--precision",
                     "bf16", "--impl", "fused,eager,gemm_only"]) == 0
    out = capsys.readouterr().out
    assert "1024x8192->8192 train bf16   fused,eager,gemm_only" in out and "1 tables, 3 measurements" in out


def test_16bit_impls_run_in_the_dtype():
    """Every implementation of a bf16/fp16 table is built in that dtype: the stages at the GEMM
    precision kernelbench picks for the dtype (tf32), the peers on the reference in the dtype;
    a float32 state_dict resets them; the reference model is left in float32."""
    from fusedlib.kernelbench import gemm_precision
    from fusedlib.reference import make_reference
    ref = make_reference("84", 16, 8, seed=0).train()
    x = bench.bench_input(parse_shape("6x16:8"), 0, "fp16")
    state0 = {k: v.clone() for k, v in ref.state_dict().items()}
    for impl in ("naive", "fused", "eager", "gemm_only"):
        fn, module = bench.build_impl(impl, ref, "fp16")
        if module is not None:
            module.load_state_dict(state0)
            assert module.gemm.weight.dtype == torch.float16
        with torch.no_grad():
            assert fn(x).dtype == torch.float16, impl
    fused, _ = bench.build_impl("fused", ref, "bf16")
    assert fused._precision == gemm_precision("bf16") == "tf32" and fused.gemm.weight.dtype == torch.bfloat16
    assert ref.gemm.weight.dtype == torch.float32


def test_default_plan_covers_the_kernelbench_shapes():
    tables = bench.plan_tables(*bench._selection(_args()))
    keys = {(t.problem, t.shape, t.mode, t.precision) for t in tables}
    for problem in ("84", "33", "39"):
        for mode in ("train", "eval"):
            for precision in ("fp32", "tf32", "3xtf32"):
                assert (problem, PRESETS[problem], mode, precision) in keys
    # 33 and 39 are one model: v0 is timed once for them
    assert ("33", PRESETS["v0"], "train", "fp32") in keys and ("39", PRESETS["v0"], "train", "fp32") not in keys
    assert next(t for t in tables if t.precision == "fp32").impls == bench.IMPLS
    assert next(t for t in tables if t.precision == "tf32").impls == bench.IMPLS
    assert next(t for t in tables if t.precision == "3xtf32").impls == bench.STAGE_IMPLS


def test_selection_options():
    problems, shapes, modes, precisions, impls = bench._selection(
        _args("--problem", "84", "--mode", "train", "--precision", "fp32,tf32", "--stage", "fused",
              "--impl", "peers", "--shape", "v0", "--shape", "257x1000->999"))
    assert problems == ["84"] and modes == ["train"] and precisions == ["fp32", "tf32"]
    assert impls == ["fused", "eager", "compile", "compile_max_autotune", "gemm_only"]
    assert shapes["84"] == [PRESETS["v0"], Shape(257, 1000, 999)]
    _, shapes, *_ = bench._selection(_args("--problem", "33", "--sweep", "batch", "--sweep", "features",
                                           "--batches", "128,512"))
    assert shapes["33"] == [Shape(128, 4096, 4096), Shape(512, 4096, 4096), Shape(1024, 1024, 1024),
                            Shape(1024, 2048, 2048), Shape(1024, 4096, 4096), Shape(1024, 8192, 8192)]
    assert bench._selection(_args("--problem", "all", "--mode", "all"))[0] == ["84", "33", "39"]
    for bad in (("--problem", "85"), ("--impl", "cublas"), ("--precision", "fp8"), ("--batches", "x")):
        with pytest.raises(ValueError):
            bench._selection(_args(*bad))
    assert _args().fresh is False and _args("--fresh").fresh is True and _args("--append").fresh is False


def test_list_prints_the_plan_without_a_gpu(capsys):
    assert cli.main(["bench", "--list", "--problem", "39", "--shape", "39", "--mode", "train", "--precision",
                     "3xtf32"]) == 0
    out = capsys.readouterr().out
    assert "16384x4096->4096 train 3xtf32 naive,fold,sums,fused" in out and "1 tables, 4 measurements" in out


def _results_commands(tool, target="results"):
    """The argument lists of the Makefile target's commands ``$(BIN)/python -m fusedlib <tool>``
    (those inside shell loops left out)."""
    import shlex
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "Makefile").read_text().replace("\\\n", " ")
    target = text.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
    return [shlex.split(line.split(f"-m fusedlib {tool}", 1)[1]) for line in target.splitlines()
            if line.strip().startswith(f"$(BIN)/python -m fusedlib {tool} ")]


def test_make_results_16bit_appends_the_16bit_tables():
    """make results keeps all = fp32, tf32, 3xtf32 (no 16-bit table: it stays within its time);
    make results-16bit appends bf16 and fp16 at the KernelBench shapes of 84, 33 and 39 (both
    modes), stages and peers, then 84's in_features sweep in bf16 and tf32 (train; notebook 06's
    lines), then the train steps in bf16, fp16 and autocast-bf16, appended; the train steps with
    the GPU's times alone beside (--hold-us)."""
    from fusedlib.lab import trainstep
    full = [bench.plan_tables(*bench._selection(_args(*argv))) for argv in _results_commands("bench")]
    assert all({t.precision for t in plan} <= {"fp32", "tf32", "3xtf32"} for plan in full)
    assert {t.precision for t in full[0]} == {"fp32", "tf32", "3xtf32"}
    assert _results_commands("train-step") == [["--fresh", "--hold-us", "2000"]]  # the GPU's times beside
    argvs = _results_commands("bench", "results-16bit")
    assert len(argvs) == 2 and all("--append" in a and "--fresh" not in a for a in argvs)
    sweep = bench.plan_tables(*bench._selection(_args(*argvs[1])))
    assert {t.shape for t in sweep} == set(bench.sweep_shapes("in_features"))
    assert {(t.problem, t.mode) for t in sweep} == {("84", "train")} and {t.precision for t in sweep} == {"bf16", "tf32"}
    assert {"naive", "sums", "fused", "gemm_only"} <= set(sweep[0].impls)
    plan = bench.plan_tables(*bench._selection(_args(*argvs[0])))
    keys = {(t.problem, t.shape, t.mode, t.precision) for t in plan}
    assert {t.precision for t in plan} == {"bf16", "fp16"}
    assert all((p, PRESETS[p], m, d) in keys for p in ("84", "33", "39") for m in ("train", "eval")
               for d in ("bf16", "fp16"))
    assert {"eager", "compile", "gemm_only", *bench.STAGE_IMPLS} <= set(plan[0].impls)
    steps = _results_commands("train-step", "results-16bit")
    assert len(steps) == 1 and "--fresh" not in steps[0] and steps[0][-2:] == ["--hold-us", "2000"]
    assert trainstep.parse_precisions(steps[0][steps[0].index("--precision") + 1]) == ["bf16", "fp16", "autocast-bf16"]


def test_nvidia_smi_line():
    assert bench.parse_nvidia_smi("580.95.05, 1980 MHz, 2619 MHz") == {
        "driver": "580.95.05", "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 2619}
    assert bench.parse_nvidia_smi("") == {"driver": None, "sm_clock_max_mhz": None, "mem_clock_max_mhz": None}
    assert bench.parse_nvidia_smi("580.95.05, [N/A], 2619 MHz")["sm_clock_max_mhz"] is None


def test_kernel_names_reduce_to_their_function():
    assert bench.kernel_base("void fl::simt_gemm_kernel<64, 64, 16, 4, 4, 1>(fl::Problem, float const*, "
                             "float const*, float*)") == "simt_gemm_kernel"
    assert bench.kernel_base("simt_gemm_kernel") == "simt_gemm_kernel"
    assert bench.kernel_base("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>"
                             "(float*, float const*, int)") == "softmax_warp_forward"
    assert bench.kernel_base("triton_red_fused_native_batch_norm_0") == "triton_red_fused_native_batch_norm_0"


NCU_OUTPUT = '''==PROF== Connected to process 1234 (/usr/bin/python3)
==PROF== Profiling "simt_gemm_kernel" - 0: 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","python3","127.0.0.1","simt_gemm_kernel","1","7","(256, 1, 1)","(64, 16, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","402,653,184"
"0","1234","python3","127.0.0.1","simt_gemm_kernel","1","7","(256, 1, 1)","(64, 16, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","61.5"
"1","1234","python3","127.0.0.1","affine_kernel","1","7","(256, 1, 1)","(2112, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","67,200,000"
"1","1234","python3","127.0.0.1","affine_kernel","1","7","(256, 1, 1)","(2112, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","12.0"
'''


def test_ncu_csv_merges_into_profile_rows():
    ncu = bench.parse_ncu_csv(NCU_OUTPUT)
    assert ncu["simt_gemm_kernel"] == {"dram_bytes": 402653184.0, "sm_throughput_pct": 61.5}
    assert ncu["affine_kernel"]["dram_bytes"] == 67200000.0
    assert bench.parse_ncu_csv("==PROF== nothing profiled\n") == {}
    table = bench.Table("33", parse_shape("33"), "train", "fp32", ("sums",))
    kernels = [("void fl::simt_gemm_kernel<64, 64, 16, 4, 4, 1>(fl::Problem, float const*, float const*, float*)",
                1, 7000.0),
               ("fl::sums_finalize_kernel(fl::Problem)", 1, 5.0),
               ("fl::affine_kernel(float const*, float const*, float*, int, int)", 1, 25.1234)]
    rows = bench.profile_rows(table, "sums", kernels, ncu)
    assert all(list(r) == bench.PROFILE_COLUMNS for r in rows)
    assert [r["dram_bytes_per_call"] for r in rows] == [402653184, "", 67200000]
    assert [r["sm_throughput_pct"] for r in rows] == [61.5, "", 12.0]
    assert rows[2]["cuda_time_us_per_call"] == 25.123 and rows[0]["shape"] == "1024x8192->8192"
    plain = bench.profile_rows(table, "sums", kernels)
    assert {r["dram_bytes_per_call"] for r in plain} == {""}


def test_ncu_command_profiles_one_call_with_clocks_untouched(tmp_path):
    table = bench.Table("84", parse_shape("84"), "train", "fp32", ("fused",))
    cmd = bench.ncu_command("ncu", tmp_path / "log.csv", table, "fused")
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert "--profile-from-start" in cmd and "--csv" in cmd
    assert "dram__bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed" in cmd
    assert "_ncu_target('84', '1024x8192->8192', 'train', 'fp32', 'fused', 0)" in cmd[-1]


def test_estimate_grows_with_compile_peers():
    tables = bench.plan_tables(*bench._selection(_args("--impl", "stages,eager,gemm_only")))
    with_compile = bench.plan_tables(*bench._selection(_args()))
    assert 0 < bench.estimate_seconds(tables, 10, 50, False) < bench.estimate_seconds(with_compile, 10, 50, False)


def test_estimate_covers_every_stage_at_every_precision():
    """Every stage has a rate at every precision; at 84's compute-bound shape tf32 is
    estimated faster than 3xtf32, and 3xtf32 faster than fp32."""
    for impl in bench.STAGE_IMPLS:
        est = {prec: bench.estimate_seconds(bench.plan_tables(["84"], {"84": [PRESETS["84"]]}, ["train"], [prec],
                                                              [impl]), 10, 50, False)
               for prec in ("fp32", "tf32", "3xtf32")}
        assert 0 < est["tf32"] < est["3xtf32"] < est["fp32"], impl
    for prec in ("bf16", "fp16"):
        assert bench.estimate_seconds(bench.plan_tables(["84"], {"84": [PRESETS["84"]]}, ["train"], [prec],
                                                        list(bench.IMPLS)), 10, 50, False) > 0


def test_bench_without_gpu_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(["bench", "--problem", "84"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_readme_results_table(tmp_path):
    import pandas as pd

    from fusedlib.lab import report
    shape = parse_shape("84")
    path = tmp_path / "bench.csv"
    for impl, ms in (("eager", 2.0), ("compile", 1.6), ("gemm_only", 0.8), ("fused", 1.0)):
        bench.append_row(path, bench.make_row("84", shape, "train", "fp32", impl, (ms, ms, ms), 50, 1e-6, ENV))
    bench.append_row(path, bench.make_row("84", shape, "train", "3xtf32", "fused", (0.5,) * 3, 50, 1e-6, ENV))
    table = report.results_table(pd.read_csv(path, dtype={"problem": str}))
    assert "| 84 @1024×8192→8192 | train | fp32 | fused | 1.000 | 2.00× | 1.60× | 1.25 | 1.0e-06 |" in table
    assert "| 84 @1024×8192→8192 | train | 3xtf32 | fused | 0.500 | 4.00× | 3.20× | 0.62 | 1.0e-06 |" in table
    readme = "a\n<!-- results-table:begin -->\nold\n<!-- results-table:end -->\nb"
    out = report.render_readme(readme, table, report.TABLE_BEGIN, report.TABLE_END)
    assert "old" not in out and out.startswith("a\n") and out.endswith("b") and table in out
    with pytest.raises(ValueError, match="markers"):
        report.render_readme("no markers", table, report.TABLE_BEGIN, report.TABLE_END)


def test_readme_ladder_check(tmp_path):
    """The ladder paragraph counts the stage pairs within the 2 % rule at the KernelBench shape
    and names the ones over it; without all four stages in any table it is empty."""
    import pandas as pd

    from fusedlib.lab import report
    shape, path = parse_shape("84"), tmp_path / "bench.csv"
    for impl, ms in (("naive", 1.0), ("fold", 0.9), ("sums", 0.8), ("fused", 0.84), ("eager", 0.7)):
        bench.append_row(path, bench.make_row("84", shape, "train", "tf32", impl, (ms,) * 3, 50, 1e-4, ENV))
    df = pd.read_csv(path, dtype={"problem": str})
    text = report.ladder_check(df)
    assert "in 5 of 6 stage pairs; slower by more: 84 train tf32 fused against sums +5.0 %." in text
    assert text.endswith("84 tf32 fused / naive: train 0.84.")
    assert text in report.results_table(df)
    assert "at most 6 % slower than an earlier one in 6 of 6 stage pairs." in report.ladder_check(df, 0.06)
    assert report.ladder_check(df[df.impl != "fold"]) == ""


def test_dry_run_of_the_whole_harness_on_cpu(tmp_path):
    """The bench loop end to end on the CPU algebra: every table, every impl that exists at
    each precision, one row each, errors of the right size, appended across runs."""
    import pandas as pd
    out = tmp_path / "bench.csv"
    argv = ["bench", "--device", "cpu", "--out", str(out), "--problem", "84,39", "--shape", "9x40->24",
            "--impl", "naive,fused,eager,gemm_only", "--iters", "3", "--warmup", "1", "--rounds", "2"]
    assert cli.main(argv) == 0
    df = pd.read_csv(out, dtype={"problem": str})
    assert list(df.columns) == bench.COLUMNS
    # per problem and mode: fp32 and tf32 (4 impls each) + 3xtf32 (naive, fused)
    assert len(df) == 2 * 2 * (4 + 4 + 2)
    fp32 = df[(df.precision != "tf32") & (df.impl != "gemm_only")]
    assert (fp32.rel_err < 1e-5).all() and (df.median_ms > 0).all() and (df.iters == 3).all()
    tf32_stages = df[(df.precision == "tf32") & df.impl.isin(["naive", "fused"])]
    assert len(tf32_stages) == 2 * 2 * 2
    assert (tf32_stages.rel_err > 1e-5).all() and (tf32_stages.rel_err < 5e-3).all()
    assert set(df[df.precision == "3xtf32"].impl) == {"naive", "fused"}
    assert cli.main(argv + ["--mode", "eval", "--precision", "fp32"]) == 0  # all measured: one run each
    assert len(pd.read_csv(out)) == 40
    assert cli.main(argv + ["--shape", "5x24->8", "--mode", "eval", "--precision", "fp32"]) == 0  # appends the new
    df = pd.read_csv(out, dtype={"problem": str})
    assert len(df) == 40 + 2 * 4 and out.read_text().count("median_ms") == 1
    assert not df.duplicated(["problem", "batch", "in_features", "out_features", "mode", "precision", "impl"]).any()
    assert cli.main(argv + ["--mode", "eval", "--precision", "fp32", "--remeasure"]) == 0  # a second run
    assert len(pd.read_csv(out)) == 40 + 2 * 4 + 2 * 4
    assert cli.main(argv + ["--fresh", "--mode", "eval", "--precision", "fp32"]) == 0
    assert len(pd.read_csv(out)) == 2 * 4
    assert cli.main(["bench", "--device", "cpu"]) == 2  # a dry run needs --out


def test_dry_run_of_16bit_tables_on_cpu(tmp_path):
    """bf16 and fp16 tables end to end on the CPU algebra: every implementation in the dtype,
    errors against the float64 model of the 16-bit parameters and input (the dtype's output
    rounding, not more), bytes of the cost model at 2-byte X, W and Y; fp32 rows kept."""
    import pandas as pd

    from fusedlib.lab.costmodel import cost
    out = tmp_path / "bench.csv"
    argv = ["bench", "--device", "cpu", "--out", str(out), "--problem", "84", "--shape", "9x40->24",
            "--impl", "naive,fused,eager,gemm_only", "--mode", "train", "--iters", "3", "--warmup", "1",
            "--rounds", "2"]
    assert cli.main(argv + ["--precision", "fp32"]) == 0
    assert cli.main(argv + ["--precision", "16bit", "--append"]) == 0
    df = pd.read_csv(out, dtype={"problem": str})
    assert list(df.columns) == bench.COLUMNS and len(df) == 3 * 4
    assert list(df.precision.drop_duplicates()) == ["fp32", "bf16", "fp16"]
    budget = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 3e-3}   # a few units of the dtype's rounding
    for row in df.itertuples(index=False):
        assert 0 < row.rel_err < budget[row.precision], row
        c = cost("84", row.impl, 9, 40, 24, "train", row.precision)
        assert row.gbytes_per_s == pytest.approx(c.bytes / (row.median_ms * 1e-3) / 1e9, rel=1e-4)
    assert (df[df.precision != "fp32"].rel_err > 1e-4).all()  # 16-bit output: not float32's error


@pytest.mark.parametrize("rounds", ["0", "4"])
def test_rounds_out_of_range_exit_2_naming_the_option(tmp_path, capsys, rounds):
    """--rounds must be >= 1 and at most --iters; the default 5 needs --iters >= 5."""
    argv = ["bench", "--device", "cpu", "--out", str(tmp_path / "bench.csv"), "--shape", "9x40->24",
            "--problem", "84", "--impl", "fused", "--precision", "fp32", "--mode", "train", "--iters", "3",
            "--warmup", "1"]
    assert cli.main(argv + ["--rounds", rounds]) == 2
    assert "--rounds" in capsys.readouterr().err
    assert cli.main(argv) == 2                          # default --rounds 5 > --iters 3
    assert "--rounds" in capsys.readouterr().err
    assert not (tmp_path / "bench.csv").exists()
    assert _args().rounds == bench.ROUNDS == 5


def _recorder(log, name, result=None):
    def fn(x):
        log.append(name)
        return result
    return fn


def test_round_robin_interleaves_every_impl_in_blocks_per_round():
    log = []
    fns = {name: (_recorder(log, name), "fp32") for name in ("a", "b", "c")}
    times = bench.time_round_robin(fns, torch.zeros(2), warmup=2, iters=6, rounds=3)
    assert list(times) == ["a", "b", "c"]
    assert all(len(t) == 5 and t[1] <= t[0] <= t[2] and t[1] >= 0 and t[3] >= 0 and t[4] is None
               for t in times.values())                                          # no hold: no device time
    assert {name: log.count(name) for name in fns} == {"a": 8, "b": 8, "c": 8}       # warmup + iters each
    assert log[:6] == ["a", "a", "b", "b", "c", "c"]                                   # warm-ups first
    assert log[6:] == ["a", "a", "b", "b", "c", "c",                                   # then 3 rounds of 2,
                       "b", "b", "c", "c", "a", "a",                                   # round r from impl r
                       "c", "c", "a", "a", "b", "b"]


def test_round_robin_spreads_the_remainder_over_the_first_rounds():
    log = []
    fns = {name: (_recorder(log, name), None) for name in ("a", "b")}
    bench.time_round_robin(fns, torch.zeros(2), warmup=0, iters=7, rounds=3)
    assert log == ["a"] * 3 + ["b"] * 3 + ["b"] * 2 + ["a"] * 2 + ["a"] * 2 + ["b"] * 2
    assert bench.round_calls(7, 3) == [3, 2, 2] and bench.round_calls(50, 5) == [10] * 5
    assert bench.round_calls(5, 5) == [1] * 5 and sum(bench.round_calls(53, 5)) == 53


def test_round_robin_rejects_bad_rounds():
    fns = {"a": (lambda x: x, None)}
    with pytest.raises(ValueError, match="rounds"):
        bench.time_round_robin(fns, torch.zeros(2), warmup=0, iters=5, rounds=0)
    with pytest.raises(ValueError, match="iters"):
        bench.time_round_robin(fns, torch.zeros(2), warmup=0, iters=4, rounds=5)


def test_round_robin_runs_each_impl_in_its_own_precision():
    """Each impl's calls (warm-ups and every round) run inside its own context: a precision
    string goes through peer_precision, a factory is entered per round."""
    seen, entered = [], []

    @contextlib.contextmanager
    def marked():
        entered.append("c")
        yield

    def probe(name):
        return lambda x: seen.append((name, torch.backends.cuda.matmul.allow_tf32))
    before = torch.backends.cuda.matmul.allow_tf32
    fns = {"a": (probe("a"), "tf32"), "b": (probe("b"), "fp32"), "c": (lambda x: None, marked)}
    bench.time_round_robin(fns, torch.zeros(2), warmup=1, iters=4, rounds=2)
    assert {flag for name, flag in seen if name == "a"} == {True}
    assert {flag for name, flag in seen if name == "b"} == {False}
    assert len(seen) == 2 * 5 and entered == ["c"] * 3       # warm-up block + one per round
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_round_robin_names_the_failing_impl():
    def boom(x):
        raise RuntimeError("kernel failed")
    fns = {"a": (lambda x: None, None), "b": (boom, "fp32")}
    with pytest.raises(bench.TimingError, match="kernel failed") as info:
        bench.time_round_robin(fns, torch.zeros(2), warmup=1, iters=2, rounds=1)
    assert info.value.impl == "b" and isinstance(info.value.__cause__, RuntimeError)


def test_time_cuda_on_the_cpu_calls_warmup_plus_iters():
    log = []
    med, lo, hi = bench.time_cuda(_recorder(log, "a"), torch.zeros(2), warmup=2, iters=5)
    assert len(log) == 7 and 0 <= lo <= med <= hi
    with pytest.raises(ValueError, match="iters"):
        bench.time_cuda(_recorder(log, "a"), torch.zeros(2), warmup=0, iters=0)


def test_dry_run_skips_failing_impls_and_times_the_others(tmp_path, monkeypatch, capsys):
    """An implementation that fails at its build or error call, or only while timed, is warned
    about and left out; the others of the table are timed and appended in the table's order."""
    import pandas as pd
    build = bench.build_impl

    def flaky(impl, ref, precision, reset=True):
        if impl == "eager":
            raise RuntimeError("no eager today")
        fn, module = build(impl, ref, precision, reset)
        if impl != "fold":
            return fn, module
        calls = []

        def once(x):  # the error call passes, the timed calls fail
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("fold broke while timed")
            return fn(x)
        return once, module
    monkeypatch.setattr(bench, "build_impl", flaky)
    out = tmp_path / "bench.csv"
    assert cli.main(["bench", "--device", "cpu", "--out", str(out), "--problem", "84", "--shape", "9x40->24",
                     "--impl", "naive,fold,fused,eager,gemm_only", "--mode", "train", "--precision", "fp32",
                     "--iters", "4", "--warmup", "1", "--rounds", "2"]) == 0
    err = capsys.readouterr()
    assert "no eager today" in err.err and "fold broke while timed" in err.err and "2 measurement(s) failed" in err.out
    df = pd.read_csv(out, dtype={"problem": str})
    assert list(df.impl) == ["naive", "fused", "gemm_only"] and (df.iters == 4).all()


def test_sources_stamp_keeps_one_kernel_version_per_csv(tmp_path):
    """sources.json beside bench.csv records the kernel sources; appending rows measured on
    other sources, or to a CSV of unknown sources, is refused."""
    import json

    from fusedlib import build
    out = tmp_path / "bench.csv"
    stamp = bench.stamp_sources(out)                       # no rows yet: just written
    assert json.loads(stamp.read_text())["sources_sha256"] == build.sources_sha256()
    out.write_text(",".join(bench.COLUMNS) + "\n")
    assert bench.stamp_sources(out) == stamp              # same sources: appending is fine
    recorded = json.loads(stamp.read_text())
    first = sorted(recorded["sources_sha256"])[0]
    recorded["sources_sha256"][first] = "0" * 64
    stamp.write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match="other kernel sources"):
        bench.stamp_sources(out)
    stamp.unlink()
    with pytest.raises(ValueError, match="no sources.json"):
        bench.stamp_sources(out)
    argv = ["bench", "--device", "cpu", "--out", str(out), "--shape", "9x40->24", "--problem", "84",
            "--impl", "fused", "--precision", "fp32", "--mode", "train", "--iters", "3", "--warmup", "1",
            "--rounds", "3"]
    assert cli.main(argv) == 2                              # refused: unknown sources
    assert cli.main(argv + ["--fresh"]) == 0 and stamp.exists()


@pytest.mark.parametrize("problem", ["84", "33"])
def test_timed_input_is_independent_of_the_weights(problem):
    """X is drawn from a stream of its own: drawn from the one that initialised W, row i of X
    was an affine function of row i of W, X Wᵀ had an outlier diagonal and problem 84's
    softmax rows collapsed onto one column (every relative error ≈ 1e-9)."""
    from fusedlib.reference import make_reference
    shape = parse_shape("256x512->256")
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=0)
    x = bench.bench_input(shape, 0)
    w = ref.gemm.weight.detach()
    corr = torch.stack([torch.corrcoef(torch.stack([x[i], w[i]]))[0, 1] for i in range(16)])
    assert corr.abs().max() < 0.2
    if problem == "84":
        with torch.no_grad():
            y = ref(x)
        assert y.max(dim=1).values.median() < 0.1  # no row is one column


def test_iters_for_short_and_long_calls():
    """Short calls get more timed calls (up to MAX_ITERS), long ones the minimum; rounds keep
    about CALLS_PER_ROUND calls each."""
    assert bench.iters_for(12.0, 50, 5) == (50, 5)            # 39 fp32: 50 calls = 600 ms
    assert bench.iters_for(6.0, 50, 5) == (84, 8)             # 84 fp32: 500 ms / 6 ms
    assert bench.iters_for(0.4, 50, 5) == (1000, 100)         # 84 tf32: 500 ms / 0.4 ms, at most 1000
    assert bench.iters_for(1.4, 50, 5) == (358, 35)           # 84 3xtf32: 500 ms / 1.4 ms
    assert bench.iters_for(0.01, 50, 5) == (bench.MAX_ITERS, bench.MAX_ITERS // bench.CALLS_PER_ROUND)
    assert bench.iters_for(0.4, 50, 5, min_ms=0) == (50, 5)   # --min-time-ms 0: exactly --iters
    assert bench.iters_for(2.0, 50, 80) == (250, 80)
    assert bench.table_iters({"a": (lambda x: x, None)}, torch.zeros(2), 50, 5) == (50, 5)  # CPU: as given


def test_host_time_section_medians_ranges_and_row_by_row():
    """report.host_time_section: medians and ranges of host_us per implementation over the latest
    rows at the KernelBench shapes and at v0, and fused over F.linear row by row."""
    import pandas as pd
    from fusedlib.lab import report
    rows = []
    for problem, (n, k, m) in (("84", (1024, 8192, 8192)), ("39", (16384, 4096, 4096)), ("84", (128, 1024, 512))):
        for impl, us in (("fused", 40.0), ("gemm_only", 80.0), ("eager", 200.0), ("compile", 300.0)):
            rows.append({"problem": problem, "batch": n, "in_features": k, "out_features": m, "mode": "train",
                         "precision": "tf32", "impl": impl, "host_us": us + (10 if problem == "39" else 0)})
    rows.append(dict(rows[0], host_us=1000.0))               # an earlier row of the same table: replaced
    rows[0], rows[-1] = rows[-1], rows[0]
    for impl, us in (("fused", 170.0), ("gemm_only", 30.0)):  # 16-bit rows: a sentence of their own
        rows.append({"problem": "84", "batch": 1024, "in_features": 8192, "out_features": 8192, "mode": "train",
                     "precision": "bf16", "impl": impl, "host_us": us})
    text = report.host_time_section(pd.DataFrame(rows))
    float32, sixteen = text.split("\n")[2:4]
    assert float32.startswith("- float32 modules (fp32, tf32, 3xtf32): at the KernelBench shapes the fused "
                              "module 45 µs (40–50), `F.linear` 85 µs (80–90)")
    assert sixteen == ("- bf16/fp16 modules: at the KernelBench shapes the fused module 170 µs (170–170), `F.linear` "
                       "30 µs (30–30), eager PyTorch not timed, torch.compile not timed; at v0 the fused module not "
                       "timed, `F.linear` not timed, eager PyTorch not timed; row by row the fused module takes "
                       "5.67× `F.linear`'s host time (median over 1 rows, 5.67–5.67×).")
    text = float32
    assert "torch.compile 305 µs (300–310); at v0 the fused module 40 µs (40–40)" in text
    assert "takes 0.50× `F.linear`'s host time (median over 3 rows, 0.50–0.56×)" in text
    with pytest.raises(ValueError):
        report.host_time_section(pd.DataFrame([r for r in rows if r["batch"] == 128]))  # v0 alone



def test_environment_names_the_commit_and_a_tree_that_differs_from_it(tmp_path, monkeypatch):
    """records._environment's commit: the short HEAD of the tree the package runs from,
    "-dirty" appended when a tracked file differs from it (a copy whose .git is stale, as a
    remote GPU machine's can be, must not pass for that commit), FUSEDLIB_COMMIT over both."""
    import subprocess

    from fusedlib.lab import records
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(records, "PACKAGE_PARENT", tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "synthetic")
    monkeypatch.delenv("FUSEDLIB_COMMIT", raising=False)
    assert records._environment()["commit"] == head
    (tmp_path / "b.txt").write_text("untracked\n")  # untracked files leave it clean
    assert records._environment()["commit"] == head
    (tmp_path / "a.txt").write_text("two\n")
    assert records._environment()["commit"] == head + "-dirty"
    monkeypatch.setenv("FUSEDLIB_COMMIT", "5eed4d6")
    assert records._environment()["commit"] == "5eed4d6"


def test_a_held_stream_is_a_column_of_its_own_and_a_negative_hold_an_error(tmp_path, capsys):
    """--hold-us: each row's device_ms (the median with the stream held while the host enqueues)
    comes from make_row's fifth time, empty without a hold; a negative hold is refused by the
    timing function and by the command, naming it."""
    from fusedlib.lab import records, timing
    from fusedlib.reference import Shape
    env = {"gpu": "g", "torch": "t", "cuda": "c", "commit": "x"}
    shape = Shape(8, 16, 8)
    held = records.make_row("84", shape, "train", "fp32", "fused", (1.0, 0.9, 1.2, 30.0, 0.8), 50, 1e-7, env)
    plain = records.make_row("84", shape, "train", "fp32", "fused", (1.0, 0.9, 1.2, 30.0, None), 50, 1e-7, env)
    assert held["device_ms"] == 0.8 and plain["device_ms"] == "" and held["host_us"] == plain["host_us"] == 30.0
    assert list(held) == bench.COLUMNS
    with pytest.raises(ValueError, match="hold_us: expected >= 0"):
        timing.hold_cycles(torch.zeros(2), -1.0)
    assert timing.hold_cycles(torch.zeros(2), 2000.0) == 0                      # the CPU: nothing to hold
    rc = bench.main(_args("--problem", "84", "--shape", "8x16:8", "--device", "cpu", "--hold-us", "-5",
                          "--out", str(tmp_path / "b.csv")))
    assert rc == 2 and "--hold-us -5: expected a time of at least 0" in capsys.readouterr().err
