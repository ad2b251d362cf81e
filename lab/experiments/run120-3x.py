"""run120: 3xTF32 with X split in registers by the wgmma consumers (this tree) against the split
pass of main's kernels (257c3ab: `git archive 257c3ab fusedlib/kernels | tar -x` moved to
old-kernels/ in the tree the device copies; built as a second extension without its
TORCH_LIBRARY_IMPL), in one process. Output of its four calls: run120-ab.log.
  bits: the fused stage's Y, running_mean, running_var against float64 in both, at KernelBench's
        shapes, v0 (split-K), odd shapes, rand/randn/offset inputs, train and eval, and with
        split-K forced (run120's first versions kept the old order of the products: every bit
        the same; since one X tile a step feeds all three products, the order differs).
  time: the fused forward of both and this tree's sums, calls interleaved, the bench's protocol
        (256 MB L2 flush, CUDA events), medians in ms; then each kernel under torch.profiler.
VARIANT (comma-separated) adds copies of this tree with edits, built and timed beside:
  rawsmall  Xs handed to the tensor cores unrounded (they truncate it): the split's cheapest form
  lds_only  A = X's words as loaded (no shift, no split: wrong outputs, the RS mainloop's bound)
Usage: python run120-3x.py build-old | build-variant NAME | bits | time"""
import copy
import os
import shutil
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
OLD = ROOT / "old-kernels"
LINE = "    xs[q] = to_tf32(v - __uint_as_float(xb[q]));"
# (run120's third run: the lines of the version then, "    f[q] = SMALL ? to_tf32(v - __uint_as_float(big)) : big;")
VARIANTS = {"rawsmall": (LINE, "    xs[q] = __float_as_uint(v - __uint_as_float(xb[q]));"),
            "lds_only": (LINE, "    xs[q] = xb[q] = __float_as_uint(x[q]);")}
NAMES = [v for v in os.environ.get("VARIANT", "").split(",") if v]


def load_old(variant=None):
    from torch.utils.cpp_extension import load_inline

    from fusedlib import build
    kdir = Path(f"/tmp/kernels-{variant or 'old'}")
    if not kdir.exists():
        shutil.copytree(build.KERNEL_DIR if variant else OLD, kdir)
        if variant:
            old, new = VARIANTS[variant]
            text = (kdir / "gemm_wgmma.cuh").read_text()
            assert old in text, variant
            (kdir / "gemm_wgmma.cuh").write_text(text.replace(old, new))
        op = (kdir / "torch_op.cuh").read_text()
        (kdir / "torch_op.cuh").write_text(op.replace("TORCH_LIBRARY_IMPL(fusedlib, CUDA, m)",
                                                      "[[maybe_unused]] static void no_impl(torch::Library& m)"))
    bdir = Path(f"/tmp/build-{variant or 'old'}")
    bdir.mkdir(exist_ok=True)
    return load_inline(name=f"fl_{variant or 'old'}_fused", cpp_sources="", cuda_sources='#include "04_fused.cu"\n#include "torch_op.cuh"\n',
                       functions=None, extra_cuda_cflags=["-O3", "-DFL_STAGE=fused", *build.arch_flags((9, 0))],
                       extra_include_paths=[str(kdir)], build_directory=str(bdir), verbose=False)


if sys.argv[1] == "build-old":
    load_old()
    sys.exit()
if sys.argv[1] == "build-variant":
    load_old(sys.argv[2])
    sys.exit()

import fusedlib  # noqa: E402
from fusedlib import cuda  # noqa: E402
from fusedlib.build import load_stage  # noqa: E402
from fusedlib.reference import PRESETS, get_inputs, make_reference  # noqa: E402

old = load_old().eager_forward
new = load_stage("fused").eager_forward
sums = load_stage("sums").eager_forward


def call(fn, m, x):
    bn = m.bn
    split = cuda._eager_split(m, m.gemm.weight, x)
    return fn(x, *m._tensors(), m._kind, "3xtf32", m.training, bn.eps, bn.momentum, split)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


if sys.argv[1] == "bits":  # (run120's first runs: the same products in the old order, so the same bits)
    cases = [(p, s, kind, mode, sk) for p in ("84", "33") for s in ("128x1024->512", "257x1000->999", "300x4096->200",
                                                                    "256x16384->256")
             for kind in ("rand", "randn", "offset") for mode in ("train", "eval") for sk in ("", "3")]
    cases += [(p, s, kind, mode, "") for p, s in (("84", "1024x8192->8192"), ("33", "16384x4096->4096"))
              for kind in ("rand", "offset") for mode in ("train", "eval")]
    bad, worst = 0, {}
    for problem, shape, kind, mode, sk in cases:
        if sk:
            os.environ["FUSEDLIB_WGMMA_SPLITK"] = sk
        else:
            os.environ.pop("FUSEDLIB_WGMMA_SPLITK", None)
        n, rest = shape.split("x")
        k, m_ = rest.split("->")
        g = torch.Generator().manual_seed(1)
        ref = make_reference(problem, int(k), int(m_), seed=3)
        x = get_inputs(shape, kind, g).cuda()
        mods = []
        for _ in range(2):
            mod = fusedlib.from_reference(copy.deepcopy(ref), stage="fused", precision="3xtf32").cuda()
            mod.train(mode == "train")
            mods.append(mod)
        ref64 = copy.deepcopy(ref).double().cuda().train(mode == "train")
        with torch.no_grad():
            ys = [call(fn, mod, x) for fn, mod in zip((new, old), mods)]
            y64 = ref64(x.double())
        torch.cuda.synchronize()
        errs = [(rel(y, y64), rel(mod.bn.running_mean, ref64.bn.running_mean), rel(mod.bn.running_var, ref64.bn.running_var))
                for y, mod in zip(ys, mods)]
        same = torch.equal(ys[0], ys[1])
        finite = bool(torch.isfinite(ys[0]).all())
        ok = finite and all(e <= max(1e-5, 2 * o) for e, o in zip(errs[0], errs[1]))
        bad += not ok
        key = (kind, mode)
        worst[key] = max(worst.get(key, (0, 0))[0], errs[0][0]), max(worst.get(key, (0, 0))[1], errs[1][0])
        print(f"{'ok ' if ok else 'BAD'} {problem} {shape:18s} {kind:6s} {mode:5s} splitk={sk or '-'}: "
              f"new y/rm/rv {errs[0][0]:.2e} {errs[0][1]:.2e} {errs[0][2]:.2e} | old {errs[1][0]:.2e} {errs[1][1]:.2e} "
              f"{errs[1][2]:.2e} | same bits {same}, finite {finite}", flush=True)
    for key, (e_new, e_old) in sorted(worst.items()):
        print(f"worst y error {key}: new {e_new:.2e}, old {e_old:.2e}")
    print(f"accuracy: {len(cases) - bad} of {len(cases)} cases within max(1e-5, 2 × old's error) in Y and running buffers")
    sys.exit(1 if bad else 0)

flush = torch.empty(256 << 18, device="cuda")
fns = {"sums": sums, "fused_old": old, "fused_new": new, **{v: load_old(v).eager_forward for v in NAMES}}
for shape, problem, mode in (("84", "84", "train"), ("33", "33", "train"), ("39", "33", "train"),
                             ("84", "84", "eval"), ("39", "33", "eval"), ("v0", "84", "train")):
    s = PRESETS[shape]
    ref = make_reference(problem, s.in_features, s.out_features, seed=0)
    x = torch.rand(s.batch, s.in_features, device="cuda")
    mod = fusedlib.from_reference(ref, stage="fused", precision="3xtf32").cuda()
    mod.train(mode == "train")
    times = {k: [] for k in fns}
    rounds = 23 if shape == "39" else 43
    with torch.no_grad():
        for r in range(rounds):
            for k in (list(fns) if r % 2 else list(fns)[::-1]):
                flush.zero_()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                call(fns[k], mod, x)
                b.record()
                torch.cuda.synchronize()
                if r >= 3:
                    times[k].append(a.elapsed_time(b))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{shape} {mode}: sums {med['sums']:.4f}  fused(old) {med['fused_old']:.4f}  fused(new) "
          f"{med['fused_new']:.4f} ms  new/old {med['fused_new'] / med['fused_old']:.3f}  new/sums "
          f"{med['fused_new'] / med['sums']:.3f}" + "".join(f"  {v} {med[v]:.4f}" for v in NAMES), flush=True)
    if shape in ("84", "39") and mode == "train":
        with torch.no_grad():
            for k, fn in fns.items():
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        flush.zero_()
                        call(fn, mod, x)
                    torch.cuda.synchronize()
                ks = [(e.key, e.device_time_total / e.count) for e in prof.key_averages() if "fill" not in e.key.lower()
                      and "zero" not in e.key.lower()]
                print(f"  {shape} {k:10s} " + "  ".join(f"{name.split('<')[0].split('(')[0][-24:]}"
                                                      f"{'<' + name.split('<')[1].split(',')[0] if '<' in name else ''}"
                                                      f" {us:.1f}" for name, us in ks), flush=True)
