"""run228 (one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): the ping-pong schedule, a prototype.

run227 took 39's bf16 fused GEMM apart: 792 µs against cuBLAS's 686, and 750 with Z′ not stored
at all; the statistics' epilogue and the store run once a tile with the tensor cores idle (the
cooperative schedule: both consumer warpgroups share each 128 × 256 tile). ``run228_pingpong.patch``
(copied beside a copy of the kernels) gives each consumer warpgroup whole 128 × 128 tiles of its
own, the two in turn on the tensor cores, so that one's epilogue runs under the other's mainloop;
``$FUSEDLIB_PINGPONG=1`` routes the copy's sums stage (ColumnStats in train mode, AffineStore in
eval mode) to it.

At 84, 33 and 39's KernelBench shapes, bf16 (and 39 in tf32): Y and the running buffers of the
copy's sums stage, ping-pong against the package's, each one's error against the float64 module;
the kernels of a forward profiled (10 calls after an L2 flush, three rounds interleaved); the whole
forwards timed in rotated rounds with cuBLAS's GEMM alone. Writes $OUT/run228-*.csv."""
import copy as copying
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.lab.timing import time_round_robin
from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

from ab import add_patch_files, apply_edits, forward_keeping_buffers, rel  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run228-pingpong")
HERE = Path(__file__).parent

EDITS = {"gemm_wgmma.cuh": [(
    "template <class Epi>\nconst char* launch_wgmma_gemm(",
    "}  // namespace fl\n#include \"run228_pingpong.cuh\"\nnamespace fl {\n\n"
    "template <class Epi>\nconst char* launch_wgmma_gemm("), (
    """    if (p.z0 || p.parts) return "the tf32 wgmma GEMM reads X and W as they are (TMA): z0 and parts must be null";
""",
    """    if (p.z0 || p.parts) return "the tf32 wgmma GEMM reads X and W as they are (TMA): z0 and parts must be null";
    if constexpr (!Epi::kMerge) {
      if (pp_wanted<Epi>(p)) {  // run228: the ping-pong schedule, 128 × 128 tiles
        if ((err = encode_map(&b0, w, p.m, p.k, kPpBN, CU_TENSOR_MAP_SWIZZLE_128B, p.operand))) return err;
        switch (p.operand) {
          case OPERAND_BF16: return launch_pp<Epi, OPERAND_BF16>(p, out, a, b0, st);
          case OPERAND_FP16: return launch_pp<Epi, OPERAND_FP16>(p, out, a, b0, st);
          default: return launch_pp<Epi, OPERAND_FP32>(p, out, a, b0, st);
        }
      }
    }
""")]}


def pingpong_kernels(dest: Path) -> Path:
    """A copy of the kernels with the ping-pong kernel behind $FUSEDLIB_PINGPONG."""
    copy_kernels(dest)
    add_patch_files(dest, HERE / "run228_pingpong.patch")
    apply_edits(dest, EDITS)
    return dest


def direct(ext, module, precision: str, training: bool, pingpong: bool = False):
    """``call(x)``: the module's forward by ``ext``'s kernels (no dispatcher), ping-pong or not."""
    t, bn = module._tensors(), module.bn

    def call(x):
        os.environ["FUSEDLIB_PINGPONG"] = "1" if pingpong else "0"
        try:
            return ext.eager_forward(x, *t, module._kind, precision, training, bn.eps, bn.momentum)
        finally:
            os.environ.pop("FUSEDLIB_PINGPONG", None)
    return call


@torch.no_grad()
def main() -> None:
    package = {s: load_stage(s) for s in ("sums", "fused")}
    copy = load_stage("sums", 0, COPY)
    checks, krows, rrows = [], [], []
    for problem, dtype in (("39", torch.bfloat16), ("84", torch.bfloat16), ("33", torch.bfloat16), ("39", torch.float32)):
        sh = PRESETS[problem]
        label = "bf16" if dtype == torch.bfloat16 else "tf32"
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
        mod = from_reference(ref, stage="sums", precision="tf32").cuda().train().to(dtype)
        x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=dtype)
        exact_mod = copying.deepcopy(ref).to("cuda", torch.float64).train()
        exact = exact_mod(x.double())
        exact_eval = exact_mod.eval()(x.double())
        variants = {
            "sums train": direct(package["sums"], mod, "tf32", True),
            "sums train pp": direct(copy, mod, "tf32", True, True),
            "sums eval": direct(package["sums"], mod, "tf32", False),
            "sums eval pp": direct(copy, mod, "tf32", False, True),
            "fused train": direct(package["fused"], mod, "tf32", True),
        }
        outs = {v: forward_keeping_buffers(fn, x, mod.bn) for v, fn in variants.items()}
        for v, (y, rm, rv, _) in outs.items():
            base = outs[v.replace(" pp", "")]
            row = dict(problem=problem, dtype=label, variant=v, rel_err=rel(y, exact_eval if "eval" in v else exact),
                       bit_identical_to_package=torch.equal(y, base[0]),
                       max_rel_diff=((y.float() - base[0].float()).abs().max() / base[0].float().abs().max()).item(),
                       running_mean_rel_diff=rel(rm, base[1]), running_var_rel_diff=rel(rv, base[2]))
            checks.append(row)
            print(row, flush=True)
        w, b = ref.gemm.weight.cuda().to(dtype), ref.gemm.bias.cuda().to(dtype)
        variants["cuBLAS"] = lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)
        for r in range(3):
            for v, fn in variants.items():
                ker = profile_kernels(fn, x, calls=10)
                krows.append(dict(problem=problem, dtype=label, variant=v, round=r, total_us=sum(us for _, _, us in ker),
                                  gemm_us=max(us for _, _, us in ker),
                                  kernels=" | ".join(f"{n[:50]} {us:.1f}" for n, _, us in ker)))
                print({k: val for k, val in krows[-1].items() if k != "kernels"}, flush=True)
        timed = {v: (variants[v], "tf32" if dtype == torch.float32 else None)
                 for v in ("sums train", "sums train pp", "fused train", "cuBLAS")}
        res = time_round_robin(timed, x, warmup=10, iters=100 if problem == "39" else 200, rounds=10)
        for v, (med, lo, hi, _) in res.items():
            rrows.append(dict(problem=problem, dtype=label, variant=v, median_ms=med, min_ms=lo, max_ms=hi))
        print(rrows[-4:], flush=True)
    c, k, rr = pd.DataFrame(checks), pd.DataFrame(krows), pd.DataFrame(rrows)
    c.to_csv(OUT / "run228-checks.csv", index=False)
    k.to_csv(OUT / "run228-kernels.csv", index=False)
    rr.to_csv(OUT / "run228-rounds.csv", index=False)
    pd.set_option("display.width", 220)
    print(c.round(7).to_string(index=False))
    print(k.groupby(["problem", "dtype", "variant"], sort=False)[["gemm_us", "total_us"]].median().round(1).to_string())
    cub = rr[rr.variant == "cuBLAS"].set_index(["problem", "dtype"]).median_ms
    rr["over_cuBLAS"] = [m / cub[(p, d)] for p, d, m in zip(rr.problem, rr.dtype, rr.median_ms)]
    print(rr.round(4).to_string(index=False))


@torch.no_grad()
def smoke() -> None:
    """Small shapes first (a hang here costs a minute, not the call): the copy's ping-pong sums
    stage against the package's, bf16 and tf32, train and eval."""
    package, copy = load_stage("sums"), load_stage("sums", 0, COPY)
    os.environ["FUSEDLIB_WGMMA_SPLITK"] = "1"  # (the ping-pong kernel runs no split-K)
    for n, k, m in ((256, 256, 256), (300, 192, 200), (1024, 512, 1024)):
        for dtype in (torch.bfloat16, torch.float32):
            ref = make_reference("33", k, m, seed=0)
            mod = from_reference(ref, stage="sums", precision="tf32").cuda().train().to(dtype)
            x = torch.randn(n, k, device="cuda", dtype=dtype)
            for training in (True, False):
                y0 = forward_keeping_buffers(direct(package, mod, "tf32", training), x, mod.bn)[0]
                y1 = forward_keeping_buffers(direct(copy, mod, "tf32", training, True), x, mod.bn)[0]
                torch.cuda.synchronize()
                print(f"smoke {n}x{k}->{m} {dtype} train={training}: max |diff| / max |y| = "
                      f"{((y1.float() - y0.float()).abs().max() / y0.float().abs().max()).item():.3g}", flush=True)


if __name__ == "__main__":
    pingpong_kernels(COPY)
    if sys.argv[1:] == ["smoke"]:
        smoke()
    elif sys.argv[1:] != ["copy"]:
        main()
