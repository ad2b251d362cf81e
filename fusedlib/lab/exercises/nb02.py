"""Checks for notebook 02 (the naive stage): predict its DRAM bytes; count a grid's waves; (GPU)
move 33's scale into the GEMM's epilogue in a copy of the kernels and rebuild it."""
from __future__ import annotations

from fusedlib.lab.costmodel import cost
from fusedlib.lab.exercises import ExerciseError, exercise, expect
from fusedlib.lab.exercises.solutions import nb02 as solutions


def _gemm_bytes_only(problem, n, k, m):
    """The known-wrong answer: the GEMM's operands and output, the passes after it forgotten."""
    return 4.0 * (n * k + m * k + n * m)


@exercise(solution=solutions.naive_bytes, wrong=_gemm_bytes_only,
          verified="the naive stage's DRAM bytes match the cost model within one percent at five shapes of 84 and 33/39")
def check_naive_bytes(naive_bytes) -> None:
    """``naive_bytes(problem, n, k, m)`` → bytes read plus written by the naive stage's
    train-mode forward (float32), compared with :func:`fusedlib.lab.costmodel.cost` within 1 %."""
    for problem in ("84", "33"):
        for n, k, m in ((1024, 8192, 8192), (16384, 4096, 4096), (512, 300, 1000), (4096, 64, 2048), (256, 4096, 512)):
            want = cost(problem, "naive", n, k, m, "train").bytes
            got = float(naive_bytes(problem, n, k, m))
            expect(abs(got - want) <= 0.01 * want,
                   f"problem {problem} at {n}x{k}->{m}: {got / 1e6:.1f} MB, the cost model counts {want / 1e6:.1f} MB "
                   f"(= {want / (4 * n * m):.2f} N×M tensors of float32 in all)")


def _waves_without_rounding(tiles, sms, blocks_per_sm):
    """The known-wrong answer: a fractional number of waves, and no idle slots."""
    return tiles / (sms * blocks_per_sm), 1.0


@exercise(solution=solutions.waves, wrong=_waves_without_rounding,
          verified="waves and busy share right for full, partial and single waves")
def check_waves(waves) -> None:
    """``waves(tiles, sms, blocks_per_sm)`` → (number of waves, an int; share of the block
    slots busy over those waves, a float in (0, 1])."""
    for tiles, sms, per_sm, want in ((512, 132, 1, (4, 512 / 528)), (264, 132, 2, (1, 1.0)),
                                     (133, 132, 1, (2, 133 / 264)), (64, 132, 1, (1, 64 / 132)),
                                     (2048, 132, 2, (8, 2048 / 2112))):
        got = waves(tiles, sms, per_sm)
        expect(isinstance(got[0], int) or float(got[0]).is_integer(),
               f"{tiles} tiles on {sms} SMs: a grid runs in a whole number of waves, got {got[0]}")
        expect(int(got[0]) == want[0], f"{tiles} tiles, {sms} SMs × {per_sm} blocks: {want[0]} waves, got {got[0]}")
        expect(abs(float(got[1]) - want[1]) < 1e-9,
               f"{tiles} tiles, {sms} SMs × {per_sm} blocks: busy share {want[1]:.3f}, got {float(got[1]):.3f}")


# ---------------------------------------------------------------- GPU: an epilogue edited and rebuilt
#: Problem 33 shapes the edited naive stage runs (fp32: the SIMT GEMM and its C-tile epilogue).
FUSE_SHAPES = ((257, 1000, 999), (64, 256, 128))


def _scale_twice(kernels):
    """The known-wrong answer: the epilogue multiplies by s, but the scale pass still runs (Z∘s∘s)."""
    solutions.scale_in_epilogue(kernels)


def _run_edited(rank: int, kernel_dir: str, out: str) -> None:
    """In a process of its own (loading the edited extension re-registers the operator's CUDA
    kernel; ``rank`` is the index torch.multiprocessing.spawn passes): the edited naive stage's
    eager forward and the package's, problem 33, train mode, at FUSE_SHAPES, in fp32 (the SIMT
    GEMM) and, on compute capability 8.0 or later, tf32 (the tensor-core GEMM: on an H100 or H200
    the wgmma one, whose epilogue is not store_tile): each one's error against float64 and the
    CUDA kernels it launches, saved to ``out``/rows.pt."""
    import copy
    from pathlib import Path

    import torch

    import fusedlib
    from fusedlib import build
    from fusedlib.reference import make_reference
    edited, package = build.load_stage("naive", kernel_dir=Path(kernel_dir)), build.load_stage("naive")
    rows = []
    precisions = ("fp32", "tf32") if torch.cuda.get_device_capability() >= (8, 0) else ("fp32",)
    for (n, k, m), precision in ((s, p) for s in FUSE_SHAPES for p in precisions):
        ref = make_reference("33", k, m, seed=0).cuda()
        x = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        want = copy.deepcopy(ref).double()(x.double())
        for name, ext in (("edited", edited), ("package", package)):
            mod = fusedlib.from_reference(ref, stage="naive")
            b = mod.bn
            args = (x, mod.gemm.weight, mod.gemm.bias, mod.scale, b.weight, b.bias, b.running_mean, b.running_var,
                    b.num_batches_tracked, "33", precision, True, b.eps, b.momentum)
            with torch.no_grad():
                ext.eager_forward(*args)  # the first call's one-time work (workspaces) stays out of the count
                torch.cuda.synchronize()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    y = ext.eager_forward(*args)
                    torch.cuda.synchronize()
            kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                       and "memset" not in e.name.lower() and "memcpy" not in e.name.lower()]
            err = ((y.double() - want).norm() / want.norm()).item()
            rows.append({"shape": f"{n}x{k}->{m}", "precision": precision, "build": name, "rel_err": err,
                         "kernels": kernels})
    torch.save(rows, Path(out) / "rows.pt")


def _read_edit(kernels) -> list[str]:
    """What a reading of the edited sources in folder ``kernels`` finds missing (empty: nothing): the
    scale in ``store_tile`` (epilogue.cuh), and problem 33's scale pass in 01_naive.cu kept on the
    wgmma path only. A text check, the hint a machine without a GPU can give: it cannot tell a
    right edit from a wrong one that reads alike."""
    import re
    epilogue, naive = (kernels / "epilogue.cuh").read_text(), (kernels / "01_naive.cu").read_text()
    missing = []
    start = epilogue.find("void store_tile")
    end = epilogue.find("\n}\n", start)
    if start < 0 or not re.search(r"scale_at\s*<\s*OP\s*>\s*\(\s*p\s*,\s*j\s*\)", epilogue[start:end]):
        missing.append("epilogue.cuh: store_tile does not multiply by scale_at<OP>(p, j)")
    launch = re.search(r"scale_kernel\s*<<<[^;]*p\.scale\s*,\s*p\.scale_len", naive)
    if launch is None:
        missing.append("01_naive.cu: the scale pass is gone on every path, but the wgmma GEMM (H100, H200) stores "
                       "its tile without store_tile: keep the pass where p.path == PATH_WGMMA")
    else:
        condition = naive[naive.rfind("if (", 0, launch.start()):launch.start()]
        if "PATH_WGMMA" not in condition:
            missing.append("01_naive.cu: the scale pass still runs on every path: run it only where "
                           "p.path == PATH_WGMMA")
    return missing


@exercise(solution=solutions.fuse_scale, wrong=_scale_twice, gpu=True,
          verified="the edited naive stage is right at every shape and launches one kernel fewer (GPU)")
def check_fuse_scale(edit) -> None:
    """``edit(kernels)`` edits the copy of the kernel sources in folder ``kernels`` (a
    pathlib.Path, :func:`fusedlib.build.copy_kernels`) so that problem 33's naive stage
    multiplies by the scale in its GEMM's epilogue and drops the scale pass. With a CUDA GPU the
    copy is built with the project's build (``load_stage("naive", kernel_dir=...)``, about two
    minutes the first time) and run in a process of its own: its output against float64 at
    FUSE_SHAPES (as the package's naive stage), and one CUDA kernel fewer, in fp32; in tf32 its
    output alone (the wgmma GEMM, whose epilogue is not store_tile, keeps the pass). Without one,
    the edited stage is compiled (nvcc, where there is one) and its text read (:func:`_read_edit`):
    "not yet" for a copy without the two edits; with them, the check still says it cannot run it,
    as only running the kernels tells right from wrong."""
    import shutil
    import tempfile
    from pathlib import Path

    import torch

    from fusedlib import build
    with tempfile.TemporaryDirectory() as tmp:
        kernels = build.copy_kernels(Path(tmp) / "kernels")
        edit(kernels)
        if not torch.cuda.is_available():
            nvcc = shutil.which("nvcc") is not None
            if nvcc:
                try:
                    build.compile_check(kernels / build.STAGE_FILES["naive"], (8, 0))
                except build.KernelBuildError as exc:
                    raise ExerciseError(f"the edited naive stage does not compile:\n{str(exc)[-1500:]}") from None
            missing = _read_edit(kernels)
            compiled = "compiles" if nvcc else "was not compiled (no nvcc)"
            if missing:
                raise ExerciseError(f"not yet: the edited naive stage {compiled}, but a reading of its text finds:\n- "
                                    + "\n- ".join(missing) + "\n(a text check, a hint only: running it needs a CUDA GPU)")
            raise ExerciseError(f"the edited naive stage {compiled}; running it needs a CUDA GPU (its text has both "
                                "edits: a text check, a hint only)")
        import torch.multiprocessing as mp
        mp.spawn(_run_edited, args=(str(kernels), tmp), nprocs=1, join=True)
        rows = torch.load(Path(tmp) / "rows.pt")
    for shape, precision in dict.fromkeys((r["shape"], r["precision"]) for r in rows):
        got, base = (next(r for r in rows if (r["shape"], r["precision"], r["build"]) == (shape, precision, build))
                     for build in ("edited", "package"))
        if precision == "tf32":  # accuracy alone: the wgmma GEMM keeps its pass, mma.sync's goes
            expect(got["rel_err"] <= max(5e-3, 2 * base["rel_err"]),
                   f"at {shape} in tf32 the edited stage's output is {got['rel_err']:.1e} from float64 (the package's "
                   f"{base['rel_err']:.1e}): the wgmma GEMM (H100, H200) stores its tile from registers "
                   f"(epilogue_from_fragments), not through store_tile: keep the scale pass where p.path == PATH_WGMMA")
            continue
        expect(got["rel_err"] <= max(1e-5, 2 * base["rel_err"]),
               f"at {shape} the edited stage's output is {got['rel_err']:.1e} from float64 (the package's "
               f"{base['rel_err']:.1e}): is Z∘s scaled once, and BatchNorm reading it?")
        expect(len(got["kernels"]) == len(base["kernels"]) - 1,
               f"at {shape} the edited stage launches {len(got['kernels'])} kernels ({_names(got['kernels'])}), the "
               f"package's {len(base['kernels'])} ({_names(base['kernels'])}): the scale pass should be gone")


def _names(kernels: list[str]) -> str:
    """CUDA kernels' names without their templates and arguments, comma-separated."""
    return ", ".join(name.split("(")[0].split("<")[0].split(" ")[-1] for name in kernels)
