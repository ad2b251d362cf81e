"""run101/run102: an A/B of the fused stage in one process, calls interleaved: "main" = this
tree's kernels, "B" = a copy of them with VARIANT's edits, built as a second extension without
its TORCH_LIBRARY_IMPL (both are called through their eager_forward); the sums stage beside
them. run101 (VARIANT=stores_last): main's epilogue against the merging epilogue with Z stored
after the partials, fence and count (run100-epilogue-main.cuh was the tree then: the columns
of its log read main = "fused(main)", B = "fused(stores last)"). run102 (VARIANT=unroll16): the
last tile's merge loading 16 row tiles' partials ahead instead of 4. Train, KernelBench
shapes, the bench's protocol (256 MB L2 flush, CUDA events), 40 rounds; medians in ms.
run105 (VARIANT=serial,chains4,nomerge): the tree merged the partials in 16 chains
(common.cuh kMergeChains); serial = one chain, chains4 = four. run106 (VARIANT=chains4,evlast,
evboth,nomerge): the tree merges in 8 chains; evlast stores the partials with L2 evict_last,
evboth also Z' with evict_first. run107 (VARIANT=mergeoff,nofinal,fastdiv,nomerge): what the
merge's cost is made of. Then (PROFILE=1) the kernels'
own times under torch.profiler at 39 and 84 tf32, and each variant's largest difference
from the tree's output.
Usage: VARIANT=... python run101-ab.py build-b | time"""
import os
import shutil
import statistics
import sys
from pathlib import Path

import torch

L = Path(__file__).resolve().parent
KROOT = Path("/tmp/kernels-b")
F = "kPartialsEvictLast = false, kZEvictFirst = false"
VARIANTS = {"serial": {"common.cuh": ("constexpr int kMergeChains = 8;", "constexpr int kMergeChains = 1;")},
            "chains4": {"common.cuh": ("constexpr int kMergeChains = 8;", "constexpr int kMergeChains = 4;")},
            "evlast": {"common.cuh": (F, "kPartialsEvictLast = true, kZEvictFirst = false")},
            "evboth": {"common.cuh": (F, "kPartialsEvictLast = true, kZEvictFirst = true")},
            # run107 diagnostics (wrong outputs, timing only): the merge compiled in but never run; the
            # merge without finalize_column
            "mergeoff": {"epilogue.cuh": ("if (!*flag) return;", "if (!*flag || p.n > 1) return;")},
            "nofinal": {"epilogue.cuh": ("finalize_column(p, n0 + cc, mo.mean, mo.m2 / mo.n, false);",
                                         "p.coef[n0 + cc] = mo.mean; p.coef[p.m + n0 + cc] = mo.m2;")},
            # run107: one reciprocal a Chan merge instead of two divisions (other last bits)
            "fastdiv": {"common.cuh": ("return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};",
                                       "const float r = __frcp_rn(n);\n  return {n, a.mean + d * (b.n * r), a.m2 + b.m2 + d * d * (a.n * b.n * r)};")},
            # diagnostics (run103; wrong outputs, timing only): no merge at all, no fence before the count
            "nomerge": {"epilogue.cuh": ("if (!*flag) return;", "return;")},
            "nofence": {"epilogue.cuh": ("__threadfence();  // this tile's partials", "//")}}
NAMES = [v for v in os.environ.get("VARIANT", "").split(",") if v]


def load_b(variant):
    from torch.utils.cpp_extension import load_inline

    from fusedlib import build
    KDIR = KROOT / variant
    if not KDIR.exists():
        shutil.copytree(build.KERNEL_DIR, KDIR)
        for name, (old, new) in VARIANTS[variant].items():
            text = (KDIR / name).read_text()
            assert old in text, (name, old)
            (KDIR / name).write_text(text.replace(old, new))
        op = (KDIR / "torch_op.cuh").read_text()
        (KDIR / "torch_op.cuh").write_text(op.replace("TORCH_LIBRARY_IMPL(fusedlib, CUDA, m)", "[[maybe_unused]] static void no_impl(torch::Library& m)"))
    bdir = Path(f"/tmp/build-{variant}")
    bdir.mkdir(exist_ok=True)
    return load_inline(name=f"fl_{variant}_fused", cpp_sources="", cuda_sources='#include "04_fused.cu"\n#include "torch_op.cuh"\n',
                       functions=None, extra_cuda_cflags=["-O3", "-DFL_STAGE=fused", *build.arch_flags((9, 0))],
                       extra_include_paths=[str(KDIR)], build_directory=str(bdir), verbose=False)


if sys.argv[1] == "build-b":
    load_b(sys.argv[2])
    sys.exit()

import fusedlib  # noqa: E402
from fusedlib import cuda  # noqa: E402
from fusedlib.build import load_stage  # noqa: E402
from fusedlib.reference import PRESETS, make_reference  # noqa: E402

fns = {"sums": load_stage("sums").eager_forward, "fused_main": load_stage("fused").eager_forward,
       **{v: load_b(v).eager_forward for v in NAMES}}
flush = torch.empty(256 << 18, device="cuda")
torch.manual_seed(0)
for shape, problem, precision in (("39", "33", "tf32"), ("84", "84", "tf32"), ("33", "33", "tf32"),
                                  ("39", "33", "3xtf32"), ("84", "84", "3xtf32"), ("39", "33", "fp32"),
                                  ("84", "84", "fp32")):
    s = PRESETS[shape]
    ref = make_reference(problem, s.in_features, s.out_features, seed=0).cuda()
    x = torch.rand(s.batch, s.in_features, device="cuda")
    m = fusedlib.from_reference(ref, stage="fused", precision=precision)
    bn = m.bn
    split = cuda._eager_split(m, m.gemm.weight, x) if precision == "3xtf32" else None
    args = (x, *m._tensors(), m._kind, precision, True, bn.eps, bn.momentum, split)
    times = {k: [] for k in fns}
    with torch.no_grad():
        y = {k: fn(*args) for k, fn in fns.items()}
        assert all(v is not None for v in y.values())
        for r in range(43):
            for k in (list(fns) if r % 2 else list(fns)[::-1]):  # the order reversed every other round
                fn = fns[k]
                flush.zero_()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn(*args)
                b.record()
                torch.cuda.synchronize()
                if r >= 3:
                    times[k].append(a.elapsed_time(b))
    med = {k: statistics.median(v) for k, v in times.items()}
    line = f"{shape} {precision:6s}: sums {med['sums']:.4f} fused(main) {med['fused_main']:.4f} ms, main/sums " \
           f"{med['fused_main'] / med['sums']:.3f}"
    for v in NAMES:
        diff = (y[v] - y["fused_main"]).abs().max().item()
        line += f" | {v} {med[v]:.4f} ms, /main {med[v] / med['fused_main']:.3f}, max |diff| {diff:.2e}"
    print(line, flush=True)
    if os.environ.get("PROFILE") and precision == "tf32" and shape in ("39", "84"):
        with torch.no_grad():
            for k, fn in fns.items():
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        flush.zero_()
                        fn(*args)
                    torch.cuda.synchronize()
                ks = [(e.key, e.device_time_total / e.count) for e in prof.key_averages() if "fill" not in e.key.lower()
                      and "zero" not in e.key.lower()]
                print(f"  {shape} {k:12s} " + "  ".join(f"{name.split('<')[0].split('(')[0][-28:]} {us:.1f}"
                                                   for name, us in ks), flush=True)
