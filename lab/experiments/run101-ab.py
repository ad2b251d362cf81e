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
evboth,nomerge): the tree merged in 8 chains; evlast stored the partials with L2 evict_last,
evboth also Z' with evict_first (switches since removed). run107 (VARIANT=mergeoff,nofinal,
fastdiv,nomerge): what the merge's cost is made of. run108 (VARIANT=timed): when each merge
runs, how long, and when each CTA ends. run109 (VARIANT=ahead1,timed): the tree loaded 2 tiles
of each chain a round, ahead1 one. run110 (VARIANT=timed,nomerge): the partials kept
column-major (reverted). run111 (VARIANT=static,timed): the persistent tf32 GEMM took its tiles
from a global counter (next_unit), static = blockIdx.x + f·gridDim.x. run112 (VARIANT=lastmerge):
the tree's column-block merges run as units after the tiles (merge_slice), lastmerge = the last
tile of each block merges. run113 (VARIANT=lastmerge): sums' finalize also four threads a column
(merge_columns). run120 (VARIANT=mbarslots): the unit hand-off on mbarrier slots against the
tree's named barrier. Variants whose anchors a later tree no longer has were run on the tree of their
run (branch merge-experiments). Then (PROFILE=1) the kernels' own times under torch.profiler at
39 and 84 tf32, and each variant's largest difference from the tree's output.
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
            "ahead1": {"common.cuh": ("constexpr int kMergeAhead = 2;", "constexpr int kMergeAhead = 1;")},
            "evlast": {"common.cuh": (F, "kPartialsEvictLast = true, kZEvictFirst = false")},
            "evboth": {"common.cuh": (F, "kPartialsEvictLast = true, kZEvictFirst = true")},
            # run107 diagnostics (wrong outputs, timing only): the merge compiled in but never run; the
            # merge without finalize_column
            "mergeoff": {"epilogue.cuh": ("if (!*flag) return;", "if (!*flag || p.n > 1) return;")},
            "nofinal": {"epilogue.cuh": ("finalize_column(p, n0 + cc, mo.mean, mo.m2 / mo.n, false);",
                                         "p.coef[n0 + cc] = mo.mean; p.coef[p.m + n0 + cc] = mo.m2;")},
            # run108 (diagnostic, wrong outputs): globaltimer stamps (ns, low 32 bits) in the running buffers:
            # running_mean[2j], [2j + 1] = merge of column block j begins, ends; running_mean[64 + j] = its
            # CTA; running_var[b], [2048 + b] = CTA b's consumers begin, end (tf32, persistent)
            "timed": {"epilogue.cuh": ("""  for (int cc = tid; cc < cols; cc += THREADS) {
    const Moments mo = merge_column_partials(p, n0 + cc, BM);
    finalize_column(p, n0 + cc, mo.mean, mo.m2 / mo.n, false);
  }""", """  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (int cc = tid; cc < cols; cc += THREADS) {
    const Moments mo = merge_column_partials(p, n0 + cc, BM);
    p.coef[n0 + cc] = mo.mean; p.coef[p.m + n0 + cc] = mo.m2;
  }
  epilogue_sync<THREADS>();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (tid == 0) {
    reinterpret_cast<unsigned*>(p.running_mean)[2 * col_block] = (unsigned)t0;
    reinterpret_cast<unsigned*>(p.running_mean)[2 * col_block + 1] = (unsigned)t1;
    p.running_mean[64 + col_block] = (float)blockIdx.x;
  }"""),
                      "gemm_wgmma.cuh": ("""    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\\n");""",
                                         """    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\\n");
    unsigned long long tstart;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tstart));
    if (threadIdx.x == 128 && !PROMOTE) reinterpret_cast<unsigned*>(p.running_var)[blockIdx.x] = (unsigned)tstart;"""),
                      "gemm_wgmma.cuh ": ("""      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }
  }
#endif""", """      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }
    unsigned long long tend;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tend));
    if (threadIdx.x == 128 && !PROMOTE) reinterpret_cast<unsigned*>(p.running_var)[2048 + blockIdx.x] = (unsigned)tend;
  }
#endif""")},
            # run111's "static" (blockIdx.x + f·gridDim.x against the dynamic schedule) ran on branch
            # merge-experiments; run112–run113: the tree's merge units against the last tile of each
            # column block merging
            "lastmerge": {"gemm_wgmma.cuh": ("constexpr bool kMergeUnits = true;", "constexpr bool kMergeUnits = false;")},
            # run120: the unit hand-off through mbarrier slots (tile_full / tile_empty, as run112–run113
            # had it; racecheck counts no mbarrier ordering) against the tree's named barrier
            "mbarslots": {"gemm_wgmma.cuh": ("2 * kStages * sizeof(uint64_t) + 16 + 16;", "(2 * kStages + 4) * sizeof(uint64_t) + 16 + 16;"),
                          "gemm_wgmma.cuh ": ("  int* tile_slot = reinterpret_cast<int*>(empty + ST);",
                                              "  uint64_t* tile_full = empty + ST;\n  uint64_t* tile_empty = tile_full + 2;\n"
                                              "  int* tile_slot = reinterpret_cast<int*>(tile_empty + 2);"),
                          "gemm_wgmma.cuh  ": ("      mbar_init(empty + s, 2);\n    }\n",
                                               "      mbar_init(empty + s, 2);\n    }\n    for (int s = 0; s < 2; ++s) {\n"
                                               "      mbar_init(tile_full + s, 1);\n      mbar_init(tile_empty + s, 8);\n    }\n"),
                          "gemm_wgmma.cuh   ": ("        if (issuer) tile_slot[f % 2] = v = next_unit(p, all_units);",
                                                "        if (issuer) {\n          if (f >= 2) mbar_wait(tile_empty + f % 2, ((f / 2) - 1) & 1);\n"
                                                "          tile_slot[f % 2] = v = next_unit(p, all_units);\n          mbar_arrive(tile_full + f % 2);\n        }"),
                          "gemm_wgmma.cuh    ": ("          handoff_sync();  // the consumers take unit f from slot f % 2", ""),
                          "gemm_wgmma.cuh     ": ("        handoff_sync();  // unit f − 1 done (its epilogue); unit f's index is in slot f % 2\n"
                                                  "        u = tile_slot[f % 2];\n",
                                                  "        mbar_wait(tile_full + f % 2, (f / 2) & 1);\n        u = tile_slot[f % 2];\n"
                                                  "        __syncwarp();\n        if (threadIdx.x % 32 == 0) mbar_arrive(tile_empty + f % 2);\n")},
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
        for name, (old, new) in VARIANTS[variant].items():  # (a second edit of a file: its name + " ")
            name = name.strip()
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
           f"{med['fused_main'] / med['sums']:.3f}, max |fused − sums| {(y['fused_main'] - y['sums']).abs().max().item():.2e}"
    for v in NAMES:
        diff = (y[v] - y["fused_main"]).abs().max().item()
        line += f" | {v} {med[v]:.4f} ms, /main {med[v] / med['fused_main']:.3f}, max |diff| {diff:.2e}"
    print(line, flush=True)
    if "timed" in fns and precision == "tf32" and shape in ("39", "84"):
        with torch.no_grad():
            flush.zero_()
            fns["timed"](*args)
            torch.cuda.synchronize()
        col_blocks = -(-s.out_features // 256)
        rm = bn.running_mean.view(torch.int32).cpu().tolist()
        rv = bn.running_var.view(torch.int32).cpu().tolist()
        cta = bn.running_mean[64:64 + col_blocks].cpu().tolist()
        grid = min(132, col_blocks * (-(-s.batch // 128)))
        base = min(v & 0xffffffff for v in rv[:grid])
        us = lambda v: ((v & 0xffffffff) - base) / 1000  # noqa: E731
        ends = [us(v) for v in rv[2048:2048 + grid]]
        print(f"  {shape} timed: CTA end µs min {min(ends):.1f} median {statistics.median(ends):.1f} max {max(ends):.1f}")
        for j in range(col_blocks):
            b = int(cta[j])
            print(f"    block {j:2d} CTA {b:3d}: merge {us(rm[2 * j]):8.1f} → {us(rm[2 * j + 1]):8.1f} µs "
                  f"({us(rm[2 * j + 1]) - us(rm[2 * j]):5.1f}); CTA ends {ends[b]:8.1f}")
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
