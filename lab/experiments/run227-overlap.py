"""run227 (one H200 or H100; issue 36's ≤ 1.10 × cuBLAS at 39): what the bf16 fused GEMM's time over
cuBLAS's is made of at 39 (16384 × 4096 → 4096, train), and whether the row pass could run under
the mainloop.

NOTES' bound: at 39 the row pass alone (read Z′, write Y) costs 1.141 × cuBLAS with Z′ in float32,
1.094 × with Z′ in bf16, so ≤ 1.10 needs Z′ in bf16 *and* the row pass (or the GEMM's excess)
hidden. A copy of the kernels (run214's Problem::z16, plus three knobs read by the fused stage's
host code at each call) measures the pieces:

* ``FUSEDLIB_Z16=1``: Z′ stored in bf16, the row pass reads it (run214); ``=2``: Z′ not stored at
  all (the row pass then reads stale memory: timing only), the epilogue's store's cost;
* ``FUSEDLIB_COLGROUP=G``: the persistent GEMM's raster in groups of G column tiles over every row
  tile (column block j's statistics are complete after its group, not at the end): what that order
  costs the mainloop (X re-read from DRAM once a group at 39: X is 134 MB, the L2 50);
* ``FUSEDLIB_SIDE=1``: the producer warpgroup's three idle warps (40 registers after setmaxnreg)
  stream a side buffer of N × M bf16 elements (read, v·1.5 + 0.25, write: the affine pass's traffic
  with Z′ in bf16, 268 MB at 39) while the consumers run the GEMM. If the GEMM's time does not grow
  by the stream, memory-bound work of the row pass's size fits under the tensor cores' time on
  the same SMs, and an in-kernel row pass over finished column groups is worth building.

Every variant's kernels profiled (fusedlib.lab.profiling, 10 calls after an L2 flush each), in
three rounds interleaved; then the whole forwards (package, Z′ in bf16) and cuBLAS's GEMM alone
timed in rotated rounds at 84, 33 and 39. Writes $OUT/run227-kernels.csv and run227-rounds.csv."""
import importlib.util
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

from ab import apply_edits, eager_call, forward_keeping_buffers, round_robin_rows  # (lab/experiments)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run227-overlap")
_spec = importlib.util.spec_from_file_location("run214", Path(__file__).with_name("run214-z16.py"))
run214 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run214)

# The knobs' host code, shared with run230's copy: $FUSEDLIB_<NAME> as an int (0 unset), and
# $FUSEDLIB_COLGROUP / $FUSEDLIB_SIDE into a Problem q (the side buffer allocated once, 2 × N·M
# 16-bit elements).
ENV_INT = ("inline int env_int(const char* name) {\n"
           "  const char* e = std::getenv(name);\n"
           "  return e && *e ? std::atoi(e) : 0;\n"
           "}\n")
SIDE_KNOBS = """  q.colgroup = env_int("FUSEDLIB_COLGROUP");
  if (env_int("FUSEDLIB_SIDE")) {
    static void* buf = nullptr;
    static size_t bytes = 0;
    const size_t need = (size_t)q.n * q.m * 2;
    if (bytes < need) {
      if (buf) cudaFree(buf);
      cudaMalloc(&buf, 2 * need);
      cudaMemset(buf, 0, 2 * need);
      bytes = need;
    }
    q.side_src = buf;
    q.side_dst = static_cast<char*>(buf) + need;
    q.side_n = (long long)q.n * q.m;
  }
"""

EDITS = {
    "common.cuh": [(
        "  int z16 = 0;             // run214: Z′ (p.z) in the operand's 16-bit type\n",
        "  int z16 = 0;             // run214: Z′ (p.z) in the operand's 16-bit type (run227: 2, not stored)\n"
        "  int colgroup = 0;        // run227: the raster in groups of colgroup column tiles (0: as is)\n"
        "  void* side_src = nullptr;  // run227: the side buffer the producer's warps 1–3 stream (16-bit)\n"
        "  void* side_dst = nullptr;\n"
        "  long long side_n = 0;\n")],
    "gemm_wgmma.cuh": [(
        "// The persistent (tf32) tile scheduler:",
        """// run227: tile t of a raster in groups of G column tiles over every row tile (G ≤ 0: wg_tile_origin).
__device__ __forceinline__ void wg_tile_origin_g(int G, int t, int row_tiles, int col_tiles, int bn, int& m0, int& n0) {
  if (G <= 0) {
    wg_tile_origin(t, row_tiles, col_tiles, bn, m0, n0);
    return;
  }
  const int per_group = G * row_tiles, group = t / per_group;
  const int first_col = group * G, cols_in_group = min(G, col_tiles - first_col);
  n0 = (first_col + (t % per_group) % cols_in_group) * bn;
  m0 = ((t % per_group) / cols_in_group) * kWgBM;
}

// run227: the producer warpgroup's warps 1–3 (96 threads, 40 registers) stream this CTA's share of
// the side buffer: 8 16-bit elements a 16-byte load, four loads in flight a thread, v·1.5 + 0.25.
template <int OP>
__device__ __forceinline__ void side_stream(const Problem& p, int t) {
  if constexpr (OP != OPERAND_FP32) {
    using E = typename Element<OP>::T;
    constexpr int TH = 96, IN = 4;
    const long long quads = p.side_n / 8, per = (quads + gridDim.x - 1) / gridDim.x;
    const long long q0 = (long long)blockIdx.x * per, q1 = min(quads, q0 + per);
    const uint4* src = reinterpret_cast<const uint4*>(p.side_src);
    uint4* dst = reinterpret_cast<uint4*>(p.side_dst);
    for (long long q = q0 + t; q < q1; q += IN * TH) {
      uint4 v[IN];
#pragma unroll
      for (int i = 0; i < IN; ++i)
        if (q + i * TH < q1) v[i] = __ldcs(src + q + i * TH);
#pragma unroll
      for (int i = 0; i < IN; ++i)
        if (q + i * TH < q1) {
          E* e = reinterpret_cast<E*>(&v[i]);
#pragma unroll
          for (int k = 0; k < 8; ++k) e[k] = narrow<OP>(widen(e[k]) * 1.5f + 0.25f);
          __stcs(dst + q + i * TH, v[i]);
        }
    }
  }
}

// The persistent (tf32) tile scheduler:"""), (
        """        if (threadIdx.x % 32 == 0) mbar_arrive(split + s);  // one arrival a warp
      }
    }
  } else {""",
        """        if (threadIdx.x % 32 == 0) mbar_arrive(split + s);  // one arrival a warp
      }
    } else if constexpr (!PROMOTE) {  // run227: warps 1–3 stream the side buffer
      if (p.side_n) side_stream<OP>(p, threadIdx.x - 32);
    }
  } else {""")],
    "04_fused.cu": [(
        """  const char* e = std::getenv("FUSEDLIB_Z16");
  return e && e[0] == '1' && p.operand != OPERAND_FP32 && p.sync_phase == 0 &&
         (p.kind != 84 || (p.m % 4 == 0 && p.m <= 4 * kMaxRegRowVec * kRegRowThreads));
}""",
        """  const int z = env_int("FUSEDLIB_Z16");
  const bool any = z || env_int("FUSEDLIB_COLGROUP") || env_int("FUSEDLIB_SIDE");
  return any && p.operand != OPERAND_FP32 && p.sync_phase == 0 &&
         (z != 1 || p.kind != 84 || (p.m % 4 == 0 && p.m <= 4 * kMaxRegRowVec * kRegRowThreads));
}
// run227: the knobs, read at each call; the side buffer allocated once (2 × N·M 16-bit elements).
inline void apply_knobs(Problem& q) {
  q.z16 = env_int("FUSEDLIB_Z16");
""" + SIDE_KNOBS + """}"""), (
        "inline bool z16_wanted(const Problem& p) {",
        ENV_INT + "inline bool z16_wanted(const Problem& p) {"), (
        "    q.z16 = 1;\n", "    apply_knobs(q);\n"), (
        "    return launch_rows_z16(q, st);\n  }\n",
        "    if (q.z16 == 1) return launch_rows_z16(q, st);\n"
        "    return q.kind == 84 ? launch_online_softmax_rows(q.z, q.coef, y_out(q), q.n, q.m, q.num_batches_tracked, st)\n"
        "                        : launch_affine(q.z, q.coef, y_out(q), q.n, q.m, q.num_batches_tracked, st);\n  }\n")],
}
ORIGIN = "wg_tile_origin(u / S, row_tiles, col_tiles, BN, m0, n0)"


def overlap_kernels(dest: Path) -> Path:
    """run214's copy (Z′ in 16 bits) with run227's knobs (see the module's docstring)."""
    run214.z16_kernels(dest)
    apply_edits(dest, EDITS)
    gemm = dest / "gemm_wgmma.cuh"
    src = gemm.read_text()
    assert src.count(ORIGIN) == 3, src.count(ORIGIN)
    gemm.write_text(src.replace(ORIGIN, "wg_tile_origin_g(p.colgroup, u / S, row_tiles, col_tiles, BN, m0, n0)"))
    return dest


KNOBS = ("FUSEDLIB_Z16", "FUSEDLIB_COLGROUP", "FUSEDLIB_SIDE")


def with_knobs(call, **knobs):
    """``call`` with the copy's knobs set for its duration (the host code reads them at each call)."""
    def fn(x):
        for k in KNOBS:
            os.environ.pop(k, None)
        os.environ.update({f"FUSEDLIB_{k.upper()}": str(v) for k, v in knobs.items()})
        try:
            return call(x)
        finally:
            for k in KNOBS:
                os.environ.pop(k, None)
    return fn


def setup(problem: str, package, copy):
    """(x, {variant: callable}, module) at ``problem``'s KernelBench shape, bf16, train."""
    sh = PRESETS[problem]
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
    mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(torch.bfloat16)
    x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=torch.bfloat16)
    w, b = ref.gemm.weight.cuda().bfloat16(), ref.gemm.bias.cuda().bfloat16()
    pc, cc = eager_call(package, mod, "tf32"), eager_call(copy, mod, "tf32")
    variants = {"package": pc, "copy": cc, "z16": with_knobs(cc, z16=1), "nostore": with_knobs(cc, z16=2)}
    if problem == "39":
        variants.update({"z16 cg2": with_knobs(cc, z16=1, colgroup=2), "z16 cg4": with_knobs(cc, z16=1, colgroup=4),
                         "z16 side": with_knobs(cc, z16=1, side=1),
                         "z16 cg4 side": with_knobs(cc, z16=1, colgroup=4, side=1)})
    variants["cuBLAS"] = lambda x: torch.nn.functional.linear(x, w, b)
    return x, variants, mod


def checks(problem, x, variants, mod) -> list[dict]:
    """The copy's bits against the package's (as is; the raster and the side stream change no
    value), Z′ in bf16's difference from the package."""
    ys = {v: forward_keeping_buffers(fn, x, mod.bn)[0] for v, fn in variants.items() if v not in ("nostore", "cuBLAS")}
    out = []
    for v, y in ys.items():
        base = ys["package"] if v == "copy" else ys["z16"] if v.startswith("z16 ") else ys["package"]
        out.append(dict(problem=problem, variant=v, against="package" if base is ys["package"] else "z16",
                        bit_identical=torch.equal(y, base),
                        max_rel_diff=((y.float() - base.float()).abs().max() / base.float().abs().max()).item()))
        print(out[-1], flush=True)
    return out


def kernels(problem, x, variants, rounds=3) -> list[dict]:
    rows = []
    for r in range(rounds):
        for v, fn in variants.items():
            ker = profile_kernels(fn, x, calls=10)
            rows.append(dict(problem=problem, variant=v, round=r, total_us=sum(us for _, _, us in ker),
                             gemm_us=max(us for _, _, us in ker),
                             row_pass_us=sum(us for n, _, us in ker if "softmax" in n or "affine" in n),
                             kernels=" | ".join(f"{n[:60]} {us:.1f}" for n, _, us in ker)))
            print({k: v for k, v in rows[-1].items() if k != "kernels"}, flush=True)
    return rows


@torch.no_grad()  # (a 16-bit train call that needs a gradient goes through the operator: no direct call)
def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    krows, rrows, crows = [], [], []
    for problem in ("39", "84", "33"):
        x, variants, mod = setup(problem, package, copy)
        crows += checks(problem, x, variants, mod)
        krows += kernels(problem, x, variants)
        rrows += round_robin_rows({v: variants[v] for v in ("package", "z16", "cuBLAS")}, x, 100 if problem == "39" else 200,
                                  problem=problem)
        print(rrows[-3:], flush=True)
    k, rr = pd.DataFrame(krows), pd.DataFrame(rrows)
    k.to_csv(OUT / "run227-kernels.csv", index=False)
    rr.to_csv(OUT / "run227-rounds.csv", index=False)
    pd.DataFrame(crows).to_csv(OUT / "run227-checks.csv", index=False)
    pd.set_option("display.width", 200)
    print(k.groupby(["problem", "variant"], sort=False)[["gemm_us", "row_pass_us", "total_us"]].median().round(1).to_string())
    cub = rr[rr.variant == "cuBLAS"].set_index("problem").median_ms
    rr["over_cuBLAS"] = rr.median_ms / rr.problem.map(cub)
    print(rr.round(4).to_string(index=False))


if __name__ == "__main__":
    overlap_kernels(COPY)
    if sys.argv[1:] != ["copy"]:
        main()
