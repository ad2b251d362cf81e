"""run229 (one H200 or H100; issue 36): Z′ in bf16 stored in 16-byte pieces.

run227 found Z′ in bf16 *slower* to store than in float32 (39's fused GEMM 823 µs against 798; 84
and 33 +9 µs), though half the bytes: run214's store writes each thread's two columns as one
4-byte pair, so a warp's store instruction covers 16 bytes of each of 8 rows, half of every
32-byte sector. Here (``$FUSEDLIB_Z16=3`` in run227's copy) the four threads of a quad, which hold 8
consecutive columns of rows r and r + 8 for each j, exchange their pairs of two adjacent j (three
shuffles) so that each thread stores one 16-byte piece: a row's 16 consecutive columns, whole
sectors. The values and their rounding are run214's (``=1``), so Y must be the same bits; the row
pass reads Z′ in bf16 as with ``=1``.

At 39, 84 and 33 (bf16, train): Y of ``=3`` against ``=1`` bit for bit; the kernels of the package,
the copy as is, ``=1``, ``=3`` and ``=2`` (Z′ not stored) profiled in three rounds; the whole
forwards in rotated rounds with cuBLAS's GEMM alone. Writes $OUT/run229-*.csv."""
import importlib.util
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import load_stage

from ab import apply_edits, forward_keeping_buffers, round_robin_rows  # (lab/experiments)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run229-z16q")
_spec = importlib.util.spec_from_file_location("run227", Path(__file__).with_name("run227-overlap.py"))
run227 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run227)

EDITS = {
    "epilogue.cuh": [(
        "template <int BN, class Epi, bool DEFER = false>\n__device__ __forceinline__ void epilogue_from_fragments(",
        """// run229: two 16-bit values in one 32-bit word (a the lower half).
template <int OP>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const typename Element<OP>::T lo = narrow<OP>(a), hi = narrow<OP>(b);
  return (uint32_t)*reinterpret_cast<const uint16_t*>(&lo) | ((uint32_t)*reinterpret_cast<const uint16_t*>(&hi) << 16);
}
// run229: Z′ in the operand's 16-bit type from the m16n8 fragments, 16 bytes a store. For each pair
// of adjacent j (columns 16jj … 16jj + 15), thread t of a quad holds 4-byte pairs A0, A1 (row r, j0
// and j1) and B0, B1 (row r + 8); after three shuffles thread t holds piece t = (A0, A1, B0, B1)[t]
// of all four threads: 8 consecutive columns of one row, stored at once.
template <int OP, int BN>
__device__ __forceinline__ void z16_store_quads(const Problem& p, const float (&d)[BN / 2], float* out, int m0,
                                                int n0, int r, int t, int lane, int rows, int cols) {
  using E = typename Element<OP>::T;
  E* z = reinterpret_cast<E*>(out);
  const bool vec = (p.m & 7) == 0 && ((uintptr_t)out & 15) == 0;
  const int row = r + 8 * (t >> 1);
#pragma unroll
  for (int jj = 0; jj < BN / 16; ++jj) {
    const int j0 = 2 * jj, j1 = j0 + 1;
    const uint32_t v[4] = {pack2<OP>(d[4 * j0], d[4 * j0 + 1]), pack2<OP>(d[4 * j1], d[4 * j1 + 1]),
                           pack2<OP>(d[4 * j0 + 2], d[4 * j0 + 3]), pack2<OP>(d[4 * j1 + 2], d[4 * j1 + 3])};
    uint32_t o[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {  // round s: from thread (t + s) % 4 its value for piece t
      const int give = (t - s) & 3, from = (t + s) & 3;
      const uint32_t send = give == 0 ? v[0] : give == 1 ? v[1] : give == 2 ? v[2] : v[3];
      const uint32_t got = s == 0 ? send : __shfl_sync(0xffffffffu, send, (lane & ~3) | from);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k == from) o[k] = got;
    }
    const int col = 16 * jj + 8 * (t & 1);
    if (row >= rows) continue;
    E* dst = z + (size_t)(m0 + row) * p.m + n0 + col;
    if (vec && col + 8 <= cols) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(o[0], o[1], o[2], o[3]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // (no address taken of o: it stays in registers)
        const uint16_t h = (uint16_t)(o[i / 2] >> (16 * (i % 2)));
        if (col + i < cols) dst[i] = *reinterpret_cast<const E*>(&h);
      }
    }
  }
}

template <int BN, class Epi, bool DEFER = false>
__device__ __forceinline__ void epilogue_from_fragments("""), (
        "      if (p.z16 == 2 && out == p.z) continue;  // run227: Z′ not stored (the store's cost, for timing)\n",
        "      if (p.z16 == 2 && out == p.z) continue;  // run227: Z′ not stored (the store's cost, for timing)\n"
        "      if (p.z16 == 3 && out == p.z) continue;  // run229: stored below, 16 bytes a store\n"), (
        """      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);
    }
  };""",
        """      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);
    }
    if (p.z16 == 3 && out == p.z) {  // run229
      if (p.operand == OPERAND_BF16) z16_store_quads<OPERAND_BF16, BN>(p, d, out, m0, n0, r, t, lane, rows, cols);
      else z16_store_quads<OPERAND_FP16, BN>(p, d, out, m0, n0, r, t, lane, rows, cols);
    }
  };""")],
    "04_fused.cu": [(
        "    if (q.z16 == 1) return launch_rows_z16(q, st);\n",
        "    if (q.z16 == 1 || q.z16 == 3) return launch_rows_z16(q, st);  // (run229: 3, Z′ 16-bit too)\n"), (
        "(z != 1 || p.kind != 84 ||", "((z != 1 && z != 3) || p.kind != 84 ||")],
}


def z16q_kernels(dest: Path) -> Path:
    """run227's copy with ``$FUSEDLIB_Z16=3`` (see the module's docstring)."""
    run227.overlap_kernels(dest)
    apply_edits(dest, EDITS)
    return dest


@torch.no_grad()
def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    krows, rrows, crows = [], [], []
    for problem in ("39", "84", "33"):
        x, variants, mod = run227.setup(problem, package, copy)
        for v in [v for v in variants if v.startswith("z16 ")]:
            del variants[v]
        cc = variants["copy"]
        variants = {"package": variants["package"], "copy": cc, "z16": variants["z16"],
                    "z16q": run227.with_knobs(cc, z16=3), "nostore": variants["nostore"], "cuBLAS": variants["cuBLAS"]}
        ys = {v: forward_keeping_buffers(variants[v], x, mod.bn)[0] for v in ("package", "z16", "z16q")}
        crows.append(dict(problem=problem, z16q_equals_z16=torch.equal(ys["z16q"], ys["z16"]),
                          z16_max_rel_diff_to_package=((ys["z16"].float() - ys["package"].float()).abs().max()
                                                       / ys["package"].float().abs().max()).item()))
        print(crows[-1], flush=True)
        krows += run227.kernels(problem, x, variants)
        rrows += round_robin_rows({v: variants[v] for v in ("package", "z16q", "cuBLAS")}, x, 100 if problem == "39" else 200,
                                  problem=problem)
        print(rrows[-3:], flush=True)
    k, rr = pd.DataFrame(krows), pd.DataFrame(rrows)
    k.to_csv(OUT / "run229-kernels.csv", index=False)
    rr.to_csv(OUT / "run229-rounds.csv", index=False)
    pd.DataFrame(crows).to_csv(OUT / "run229-checks.csv", index=False)
    pd.set_option("display.width", 200)
    print(pd.DataFrame(crows).to_string(index=False))
    print(k.groupby(["problem", "variant"], sort=False)[["gemm_us", "row_pass_us", "total_us"]].median().round(1).to_string())
    cub = rr[rr.variant == "cuBLAS"].set_index("problem").median_ms
    rr["over_cuBLAS"] = rr.median_ms / rr.problem.map(cub)
    print(rr.round(4).to_string(index=False))


if __name__ == "__main__":
    z16q_kernels(COPY)
    if sys.argv[1:] != ["copy"]:
        main()
