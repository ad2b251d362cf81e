"""run136–run137: TMA multicast over clusters of two CTAs in the tf32 wgmma GEMM (gemm_wgmma.cuh's
wg_cluster_size on branch cluster-multicast, the tree these ran on), an A/B in one process: "main" = the kernels of 039e496 (built from a copy in
.cache/kernels-main as a second extension without its TORCH_LIBRARY_IMPL, called through its
eager_forward), "pair" = this tree (clusters of two where the row tiles pair up), "single" =
this tree with $FUSEDLIB_WGMMA_CLUSTER=1 (no clusters), and cuBLAS's GEMM alone (F.linear at
TF32, the bench's GEMM-only peer). Fused stage, tf32, train and eval, KernelBench shapes; the
bench's protocol (256 MB L2 flush, CUDA events), calls interleaved, the order reversed every
other round, medians of 40 rounds in ms; then each variant's largest difference from main.
Usage: python run136-ab.py build-main | time"""
import os
import statistics
import sys
from pathlib import Path

import torch

KDIR = Path(".cache/kernels-main").resolve()


def load_main():
    from torch.utils.cpp_extension import load_inline

    from fusedlib import build
    op = KDIR / "torch_op.cuh"
    text = op.read_text()
    if "TORCH_LIBRARY_IMPL(fusedlib, CUDA, m)" in text:
        op.write_text(text.replace("TORCH_LIBRARY_IMPL(fusedlib, CUDA, m)", "[[maybe_unused]] static void no_impl(torch::Library& m)"))
    bdir = Path("/tmp/build-main")
    bdir.mkdir(exist_ok=True)
    return load_inline(name="fl_main_fused", cpp_sources="", cuda_sources='#include "04_fused.cu"\n#include "torch_op.cuh"\n',
                       functions=None, extra_cuda_cflags=["-O3", "-DFL_STAGE=fused", *build.arch_flags((9, 0))],
                       extra_include_paths=[str(KDIR)], build_directory=str(bdir), verbose=False)


if sys.argv[1] == "build-main":
    load_main()
    sys.exit()

import torch.nn.functional as F  # noqa: E402

import fusedlib  # noqa: E402
from fusedlib.build import load_stage  # noqa: E402
from fusedlib.reference import PRESETS, make_reference  # noqa: E402

tree = load_stage("fused").eager_forward
main = load_main().eager_forward


def with_cluster(value):
    def call(*args):
        if value:
            os.environ["FUSEDLIB_WGMMA_CLUSTER"] = value
        else:
            os.environ.pop("FUSEDLIB_WGMMA_CLUSTER", None)
        return tree(*args)
    return call


torch.backends.cuda.matmul.allow_tf32 = True
flush = torch.empty(256 << 18, device="cuda")
torch.manual_seed(0)
for shape, problem in (("84", "84"), ("33", "33"), ("39", "33")):
    s = PRESETS[shape]
    ref = make_reference(problem, s.in_features, s.out_features, seed=0).cuda()
    x = torch.rand(s.batch, s.in_features, device="cuda")
    m = fusedlib.from_reference(ref, stage="fused", precision="tf32")
    w, b = m.gemm.weight, m.gemm.bias
    for train in (True, False):
        args = (x, *m._tensors(), m._kind, "tf32", train, m.bn.eps, m.bn.momentum, None)
        fns = {"main": lambda: main(*args), "pair": lambda: with_cluster("")(*args),
               "single": lambda: with_cluster("1")(*args), "cublas": lambda: F.linear(x, w, b)}
        times = {k: [] for k in fns}
        with torch.no_grad():
            y = {k: fn() for k, fn in fns.items()}
            for r in range(43):
                for k in (list(fns) if r % 2 else list(fns)[::-1]):
                    flush.zero_()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fns[k]()
                    e1.record()
                    torch.cuda.synchronize()
                    if r >= 3:
                        times[k].append(e0.elapsed_time(e1))
        med = {k: statistics.median(v) for k, v in times.items()}
        diff = {k: (y[k] - y["main"]).abs().max().item() for k in ("pair", "single")}
        print(f"{shape} {'train' if train else 'eval '}: main {med['main']:.4f} pair {med['pair']:.4f} single "
              f"{med['single']:.4f} cuBLAS {med['cublas']:.4f} ms | pair/main {med['pair'] / med['main']:.3f} "
              f"single/main {med['single'] / med['main']:.3f} | /cuBLAS main {med['main'] / med['cublas']:.3f} "
              f"pair {med['pair'] / med['cublas']:.3f} | max|diff| pair {diff['pair']:.1e} single {diff['single']:.1e}",
              flush=True)
os.environ.pop("FUSEDLIB_WGMMA_CLUSTER", None)
if os.environ.get("PROFILE"):  # the GEMM kernels' own times (torch.profiler), 84 and 39 train
    for shape, problem in (("84", "84"), ("39", "33")):
        s = PRESETS[shape]
        ref = make_reference(problem, s.in_features, s.out_features, seed=0).cuda()
        x = torch.rand(s.batch, s.in_features, device="cuda")
        m = fusedlib.from_reference(ref, stage="fused", precision="tf32")
        args = (x, *m._tensors(), m._kind, "tf32", True, m.bn.eps, m.bn.momentum, None)
        for name, fn in (("main", lambda: main(*args)), ("pair", lambda: with_cluster("")(*args)),
                         ("single", lambda: with_cluster("1")(*args))):
            with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    flush.zero_()
                    fn()
                torch.cuda.synchronize()
            for ev in prof.key_averages():
                if "gemm" in ev.key:
                    print(f"  {shape} {name:6s} {ev.key[:60]:60s} {ev.device_time:8.1f} µs x{ev.count}")
