"""The GPU suite in parts side by side (``make check-gpu``): the float64 forward cases of each
problem, the gradient cases with the reruns, the compute-sanitizer runs, the training runs
(tests/test_training.py, recorded under "training"), KernelBench's own correctness check at
its shapes in fp32, bf16 and fp16 (tests/test_kernelbench_eval.py, under "kernelbench"), the cases beyond 32-bit indexing
(tests/test_gpu_large.py, recorded under "large"), the operator tests
(tests/test_gpu_operator.py, with bf16/fp16 on CUDA, and KernelBench's protocol in those dtypes),
the bf16/fp16 modules and autocast on each 16-bit GEMM path (tests/test_mixed_precision.py,
recorded under "mixed_precision") and the course's GPU exercises (tests/test_exercises.py,
whose checks build edited kernels: minutes of nvcc) run as parallel pytest processes on the one
GPU (the cases are small; the host is the bottleneck), each part writing its own record
(``FUSEDLIB_VALIDATION_OUT``); the records are then joined into
``results/<gpu>/validation.json`` (tests/test_gpu.py ``merge_files``). On the H100 the 13 parts
side by side took 366 s, the time of the longest, the course's exercises, and the large part 128 s
in a call of its own (results/h100/logs/run160-suite.log, run160-large.log); each log ends with
its 15 slowest tests. Exit status: 0 if every part passed, else 1 (the record is written either
way: failing cases stay in it).

Usage: ``python tests/run_gpu_suite.py [--out DIR] [--parts P,...] [--append]`` (DIR keeps each
part's log; default build/gpu-suite; ``--append`` joins the parts run into the committed record
made on the same kernel sources: a part run again without the others).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: part -> (FUSEDLIB_GPU_PROBLEMS, pytest -k expression); each writes a record of its own.
#: The forward cases, the longest parts, run per problem in halves (84, 33: 4–5 minutes each as
#: one part on the H100) and 39's in quarters (its stages), so that no part takes much longer than
#: the gradients.
PARTS = {"forward-84a": ("84", "case_matches and (naive or fold)"),
         "forward-84b": ("84", "(case_matches and (sums or fused)) or offset_inputs"),
         "forward-33a": ("33", "case_matches and (naive or fold)"),
         "forward-33b": ("33", "(case_matches and (sums or fused)) or offset_inputs"),
         **{f"forward-39{q}": ("39", f"case_matches and {stage}")
            for q, stage in zip("abcd", ("naive", "fold", "sums", "fused"))},
         "gradients": ("84,33,39", "gradients or bit_identical or non_finite"), "sanitizer": ("84", "sanitizer"),
         "training": ("84,33", "training"),  # every GPU test of tests/test_training.py
         # KernelBench's correctness check at the KernelBench shapes, fp32/bf16/fp16 (tests/test_kernelbench_eval.py)
         "kernelbench": ("84,33,39", "kernelbench_evaluation"),
         # bf16/fp16 modules and autocast on CUDA, each 16-bit GEMM path (every GPU test of tests/test_mixed_precision.py)
         "mixed": ("84,33", None),
         # sizes beyond 32-bit indexing (N·M > 2³¹) and grids past 65535 row tiles, every stage and
         # precision: up to ≈ 60 GB of GPU memory, so it runs alone after the others (ALONE), 4–5 min
         "large": ("84,33", "large")}
#: Parts that run alone once the others have finished: beside them the large cases ran out of
#: the H100's 80 GB.
ALONE = ("large",)
#: Parts that run another test module than tests/test_gpu.py (each writes its record to the
#: part's file just the same, under keys of its own).
PART_FILES = {"training": "tests/test_training.py", "large": "tests/test_gpu_large.py",
              "kernelbench": "tests/test_kernelbench_eval.py", "mixed": "tests/test_mixed_precision.py"}
#: Parts that record nothing: every GPU test of these modules.
UNRECORDED = {"operator": ["tests/test_gpu_operator.py", "tests/test_kernelbench.py"],
              "exercises": ["tests/test_exercises.py"]}


def parts_to_join(folder: Path, chosen: list[str], committed: Path, append: bool) -> list[Path]:
    """The records joined into ``committed`` (results/<gpu>/validation.json): every recorded part's
    file in ``folder``; with ``append``, the committed record first, then the files of the parts
    run now (``chosen``), whose rows replace its rows of the same cases."""
    if append:
        return [committed, *(folder / f"{p}.json" for p in chosen if p in PARTS and (folder / f"{p}.json").exists())]
    return [folder / f"{p}.json" for p in PARTS if (folder / f"{p}.json").exists()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-suite", help="folder for logs and parts")
    parser.add_argument("--parts", help="comma list of the parts to run (default: all of them); "
                        "the record joins their files with the other parts' already in --out")
    parser.add_argument("--skip", default="", help="comma list of parts not to run (e.g. large, run in a "
                        "call of its own)")
    parser.add_argument("--append", action="store_true",
                        help="join the parts run into the committed results/<gpu>/validation.json (which must have been "
                             "made on the same kernel sources) instead of into the parts already in --out")
    args = parser.parse_args(argv)
    every = [*PARTS, *UNRECORDED]
    chosen = every if not args.parts else args.parts.split(",")
    skipped = [p for p in args.skip.split(",") if p]
    chosen = [p for p in chosen if p not in skipped]
    unknown = [p for p in chosen + skipped if p not in every]
    if unknown:
        parser.error(f"--parts, --skip: unknown {', '.join(unknown)}; expected some of {', '.join(every)}")
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    if not torch.cuda.is_available():
        print("error: the GPU suite needs a CUDA device", file=sys.stderr)
        return 2
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run as a script: the package and the suite
    from test_gpu import _gpu_slug, merge_files

    from fusedlib import build
    for stage in build.STAGE_FILES:  # build once, before the parts load the cached extensions
        build.load_stage(stage)
    build.load_backward()
    start = time.time()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    def launch(part: str) -> subprocess.Popen:
        if part in UNRECORDED:
            cmd, part_env = UNRECORDED[part], env
        else:
            problems, select = PARTS[part]
            cmd = [PART_FILES.get(part, "tests/test_gpu.py"), *(["-k", select] if select else [])]
            part_env = dict(env, FUSEDLIB_GPU_PROBLEMS=problems,
                            FUSEDLIB_VALIDATION_OUT=str(args.out / f"{part}.json"))
        return subprocess.Popen([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                                 "--durations=15", *cmd],
                                cwd=ROOT, env=part_env, stdout=(args.out / f"{part}.log").open("w"),
                                stderr=subprocess.STDOUT)

    failed = []

    def finish(part: str, proc: subprocess.Popen) -> None:
        rc = proc.wait()
        tail = (args.out / f"{part}.log").read_text().strip().splitlines()[-1:] or [""]
        print(f"{part}: rc={rc} {tail[0]} ({time.time() - start:.0f} s)", flush=True)
        if rc != 0:
            failed.append(part)

    procs = {part: launch(part) for part in chosen if part not in ALONE}  # side by side
    for part, proc in procs.items():
        finish(part, proc)
    for part in (p for p in chosen if p in ALONE):  # then one at a time
        finish(part, launch(part))
    out = ROOT / "results" / _gpu_slug() / "validation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    merge_files(parts_to_join(args.out, chosen, out, args.append), out)
    print(f"wrote {out.relative_to(ROOT)}" + (f"; failed parts: {', '.join(failed)} (logs in {args.out})"
                                              if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
