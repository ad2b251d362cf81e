"""Shared by the experiments that load a copy of the kernels beside the package's (run211,
run213, run214, run227–run232, run238, run239): the edits that make a copy (each old text found once), a module's train forward through one extension's eager_forward (not the
dispatcher, where the extension loaded last answers for every copy), one forward that leaves
the running buffers as it found them, so that every variant starts from the same state, a
module and its input at a shape and precision, the bits of variants against one call, a call
with $FUSEDLIB_* knobs set for its duration, and the normwise relative error; and by
those that time the autocast train step (run215, run221): its steps as the harness builds them."""


def eager_call(ext, module, precision: str):
    """``call(x)``: ``module``'s train-mode forward (its tensors, kind, eps, momentum) by ``ext``'s
    kernels at the GEMM ``precision`` (fp32, tf32, 3xtf32; a 16-bit module's: tf32), without a
    gradient; raises RuntimeError where the extension declines the call."""
    import torch
    t, bn = module._tensors(), module.bn

    def call(x):
        with torch.no_grad():  # (with a gradient needed, eager_forward returns None: the operator's way)
            y = ext.eager_forward(x, *t, module._kind, precision, True, bn.eps, bn.momentum)
        if y is None:
            raise RuntimeError("eager_forward declined the call (a dispatch mode, $FUSEDLIB_GEMM_PATH, or a failed check)")
        return y
    return call


def forward_keeping_buffers(call, x, bn) -> tuple:
    """(Y, running_mean, running_var, num_batches_tracked) after ``call(x)``, copies, with ``bn``'s
    buffers put back as they were before the call."""
    buffers = (bn.running_mean, bn.running_var, bn.num_batches_tracked)
    saved = [b.clone() for b in buffers]
    out = (call(x).clone(), *(b.clone() for b in buffers))
    for b, s in zip(buffers, saved):
        b.copy_(s)
    return out


def module_case(problem: str, shape, precision: str, stage: str = "fused", seed: int = 0):
    """(module, x): ``problem``'s ``stage`` module at ``shape`` (batch, in_features, out_features), in
    train mode on CUDA in ``precision``'s dtype (tf32: float32 at its GEMM precision; bf16, fp16),
    and an input in that dtype from a seeded generator (run238, run239)."""
    import torch

    from fusedlib.modules import from_reference
    from fusedlib.reference import make_reference
    n, k, m = shape
    dtype = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    mod = from_reference(make_reference(problem, k, m, seed=seed), stage=stage, precision="tf32").cuda().train()
    return mod.to(dtype), torch.randn(n, k, device="cuda", dtype=dtype, generator=torch.Generator("cuda").manual_seed(seed))


def smoke_cases(precisions):
    """(labels, module, x) of the copies' smoke tests: the fused stage at small shapes with partial
    tiles (33 at 300 × 64 → 264 and 520 × 256 → 776, 84 at 1000 × 512 → 1024) in each of
    ``precisions`` (:func:`module_case`); labels: problem, shape, precision (run238, run244)."""
    for problem, shape in (("33", (300, 64, 264)), ("84", (1000, 512, 1024)), ("33", (520, 256, 776))):
        for precision in precisions:
            yield dict(problem=problem, shape=shape, precision=precision), *module_case(problem, shape, precision)


def same_bits(want_call, calls: dict, x, bn) -> dict:
    """name → whether ``calls[name](x)`` gives ``want_call(x)``'s Y and running buffers bit for bit,
    each from the same state (:func:`forward_keeping_buffers`)."""
    import torch
    want = forward_keeping_buffers(want_call, x, bn)
    return {name: all(torch.equal(a, b) for a, b in zip(forward_keeping_buffers(call, x, bn), want))
            for name, call in calls.items()}


def with_env(call, **env):
    """``call`` with $FUSEDLIB_<NAME>=value for each keyword (``z16=1``: $FUSEDLIB_Z16=1), set for the
    duration of each call and removed after it (the copies' host code reads its knobs at each call)."""
    import os
    env = {f"FUSEDLIB_{k.upper()}": str(v) for k, v in env.items()}

    def fn(x):
        os.environ.update(env)
        try:
            return call(x)
        finally:
            for k in env:
                os.environ.pop(k, None)
    return fn


def rel(y, ref) -> float:
    """‖y − ref‖ / ‖ref‖ in float64 (normwise relative error)."""
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


def kernel_rounds(variants: dict, x, rounds: int = 3, **labels) -> list[dict]:
    """Each of ``variants`` (name → call(x)) profiled in turn, ``rounds`` times
    (fusedlib.lab.profiling.profile_kernels: the kernels of one call over 10 calls, each after an L2
    flush): a row a variant and round with ``labels`` (problem=…), ``total_us`` (every kernel),
    ``gemm_us`` (the longest: the GEMM at these shapes) and ``kernels`` (each one's name and µs),
    printed as it comes."""
    from fusedlib.lab.profiling import profile_kernels
    rows = []
    for r in range(rounds):
        for name, fn in variants.items():
            ker = profile_kernels(fn, x, calls=10)
            rows.append(dict(**labels, variant=name, round=r, total_us=sum(us for _, _, us in ker),
                             gemm_us=max(us for _, _, us in ker),
                             kernels=" | ".join(f"{n[:60]} {us:.1f}" for n, _, us in ker)))
            print({k: v for k, v in rows[-1].items() if k != "kernels"}, flush=True)
    return rows


def round_robin_rows(variants: dict, x, iters: int, **labels) -> list[dict]:
    """Whole calls of ``variants`` (name → call(x)) in rotated rounds (fusedlib.lab.timing.
    time_round_robin: 10 warm-up calls, 10 rounds of ``iters``): a row a variant with ``labels``,
    median_ms, min_ms and max_ms over the rounds."""
    from fusedlib.lab.timing import time_round_robin
    res = time_round_robin({v: (fn, None) for v, fn in variants.items()}, x, warmup=10, iters=iters, rounds=10)
    return [dict(**labels, variant=v, median_ms=med, min_ms=lo, max_ms=hi) for v, (med, lo, hi, _) in res.items()]


def report(run: str, out, checks: list, krows: list, rrows: list) -> None:
    """``out``/<run>-checks.csv, -kernels.csv (:func:`kernel_rounds`' rows) and -rounds.csv
    (:func:`round_robin_rows`') written; then printed: the checks, each variant's median GEMM and
    forward µs over the profiled rounds with the GEMM's ratio to cuBLAS's (a variant named
    "cuBLAS"), and the rounds (if any) with each median over cuBLAS's."""
    import pandas as pd
    c, k, rr = pd.DataFrame(checks), pd.DataFrame(krows), pd.DataFrame(rrows)
    for name, table in (("checks", c), ("kernels", k), ("rounds", rr)):
        table.to_csv(out / f"{run}-{name}.csv", index=False)
    pd.set_option("display.width", 220)
    print(c.round(5).to_string(index=False))
    med = k.groupby(["problem", "variant"], sort=False)[["gemm_us", "total_us"]].median().unstack(0)
    gemm = med["gemm_us"]
    print(med.assign(**{f"GEMM x cuBLAS {p}": gemm[p] / gemm.loc["cuBLAS", p] for p in gemm.columns}).round(3).to_string())
    if rrows:
        cub = rr[rr.variant == "cuBLAS"].set_index("problem").median_ms
        rr["over_cuBLAS"] = rr.median_ms / rr.problem.map(cub)
        print(rr.round(4).to_string(index=False))


def autocast_steps(problem: str, impls=("fused", "sums", "eager")) -> tuple:
    """(x, {impl: (step, context)}): the autocast-bf16 train step of each impl at ``problem``'s
    KernelBench shape, as ``python -m fusedlib train-step --precision autocast-bf16`` builds and
    runs it (fusedlib.lab.trainstep; run215, run221): ``step(x)`` one step, ``context()`` the
    autocast context it runs in."""
    import torch

    from fusedlib.lab import bench
    from fusedlib.lab.trainstep import build_precision, step_context, train_step
    from fusedlib.reference import PRESETS, make_reference
    precision, shape = "autocast-bf16", PRESETS[problem]
    ref = make_reference(problem, shape.in_features, shape.out_features, seed=0).cuda().train()
    x = bench.bench_input(shape, 0).cuda()
    dy = torch.randn(shape.batch, shape.out_features, generator=torch.Generator().manual_seed(2000)).cuda()
    steps = {}
    for impl in impls:
        model, module = bench.build_impl(impl, ref, build_precision(precision))
        steps[impl] = (train_step(model, dy, module), step_context(precision, impl))
    return x, steps


def edited_copy(dest, edits: dict):
    """A copy of the package's kernels at ``dest`` (fusedlib.build.copy_kernels) with ``edits``
    applied (:func:`apply_edits`); returns ``dest``."""
    from fusedlib.build import copy_kernels
    copy_kernels(dest)
    apply_edits(dest, edits)
    return dest


def apply_edits(dest, edits: dict) -> None:
    """In the copy of the kernels at ``dest`` (a Path), each file name → [(old, new), …]: every old
    text found exactly once (else AssertionError naming the file) and replaced."""
    for name, pairs in edits.items():
        path = dest / name
        src = path.read_text()
        for old, new in pairs:
            assert src.count(old) == 1, (name, old[:60])
            src = src.replace(old, new)
        path.write_text(src)


def problem_knob(run: str, field: str, env: str) -> dict:
    """Edits (file name → [(old, new), …], for :func:`apply_edits` through :func:`merge_edits`) that
    add ``int field`` to a copy's Problem and set it from ``$env`` (0 when unset) at each launch of
    the wgmma GEMM (launch_wg): the knob a copy's kernels read, e.g. run238's count_mode from
    $FUSEDLIB_COUNT."""
    fn = f"{run}_problem"
    return {
        "common.cuh": [("  int ranks;               // R\n};",
                        f"  int ranks;               // R\n  int {field};  // {run}: ${env}\n}};")],
        "gemm_wgmma.cuh": [
            ("      p, out, a, b0, row0, b1);", f"      {fn}(p), out, a, b0, row0, b1);"),
            ("// One launch of the width-BN kernel:",
             f"""// {run}: ${env} (0 when unset), read at each launch.
inline Problem {fn}(const Problem& p) {{
  Problem q = p;
  const char* e = std::getenv("{env}");
  q.{field} = e ? std::atoi(e) : 0;
  return q;
}}

// One launch of the width-BN kernel:"""),
        ],
    }


def merge_edits(*edits: dict) -> dict:
    """Several edit dicts (file name → [(old, new), …]) as one, each file's lists joined in order."""
    out: dict = {}
    for e in edits:
        for name, pairs in e.items():
            out.setdefault(name, []).extend(pairs)
    return out


def add_patch_files(dest, patch) -> None:
    """Write into the copy at ``dest`` the new files of ``patch`` (a Path to a `git diff` that only
    adds files, one hunk each, as run228_pingpong.patch and run230_offload.patch; `git apply
    --directory=<dest>` would do the same). Prototype kernels stay patches under lab/experiments, so
    that no .cu/.cuh outside fusedlib/kernels looks like a kernel source of the package."""
    name, lines, body = None, [], False
    for line in patch.read_text().splitlines(keepends=True):
        if line.startswith("diff --git "):
            if name:
                (dest / name).write_text("".join(lines))
            name, lines, body = line.split(" b/")[-1].strip(), [], False
        elif line.startswith("@@"):
            body = True
        elif body:
            assert line.startswith("+"), (patch.name, line[:40])
            lines.append(line[1:])
    if name:
        (dest / name).write_text("".join(lines))
