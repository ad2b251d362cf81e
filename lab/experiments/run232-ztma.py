"""run232 (one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): the engine's 16-bit Z′ stored through a TMA
epilogue, in a copy of the kernels (results/h200/NOTES.md, "The TMA epilogue (run231)").

run231's standalone GEMM put the statistics' epilogue with Z′ in bf16 stored by TMA at 1.07 × cuBLAS
at 39 and 1.04 × at 84 and 33, against the package's sums stage at 1.12 and 1.08: the engine's
register stores are what costs, not Z′'s bytes alone. This copy is run214's (Problem::z16: Z′ in
the operand's 16-bit type, with its row pass) with one change more, behind $FUSEDLIB_ZTMA=1
(Problem::z_tma): on the wgmma path the epilogue takes the tile's statistics first, then each
consumer warpgroup writes its 64 rows of Z′, 64 columns at a time, into one of two 8 KB staging
buffers (128-byte swizzle) and one thread stores the box by TMA (cp.async.bulk.tensor, a bulk
group), which runs on under the next tile's mainloop. The staging area is the epilogue's shared
memory, grown from 11 to 33 KB (32 KB from the next 1024-byte boundary, where TMA's 128-byte swizzle
starts; the ring keeps its four stages: 227 KB in all); whoever writes it
next (the next tile's statistics, a merge unit) first waits for the stores to have read it.

Checks: the fused stage's Y with $FUSEDLIB_Z16=1 and with $FUSEDLIB_ZTMA=1 as well must be equal bit
for bit (the same values, the same statistics), on small shapes in bf16 and fp16 (partial tiles)
and at the presets, where each one's error against the float64 module is set against issue 36's
2 × eager budget. Then the kernels of a forward profiled (the package's fused stage, the copy with
Z16, with Z16 + ZTMA, cuBLAS; three rounds) and whole forwards in rotated rounds. Writes
$OUT/run232-*.csv.

    python lab/experiments/run232-ztma.py copy    # write the copy (build/run232-ztma)
    python lab/experiments/run232-ztma.py smoke   # small shapes
    python lab/experiments/run232-ztma.py         # the presets
"""
import copy as copying
import importlib.util
import os
import sys
from pathlib import Path

import torch

from fusedlib.build import load_stage
from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

from ab import (apply_edits, eager_call, forward_keeping_buffers, kernel_rounds, rel,  # (lab/experiments)
                report, round_robin_rows, with_env)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run232-ztma")
HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("run214", HERE / "run214-z16.py")
run214 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run214)

ZTMA_STORE = r'''
// run232: Z′ (16-bit) through a TMA epilogue: warpgroup tid / 128 writes its 64 rows, 64 columns
// (box q) at a time, into staging buffer q % 2 of its two (8 KB each, 128-byte swizzle: 16-byte chunk
// c of row r at chunk c ^ (r % 8)); its thread 0 stores the box by TMA and commits a bulk group, and
// waits for the group two boxes back to have read a buffer before it is rewritten.
template <int OP, int BN>
__device__ __forceinline__ void store_z_tma(const Problem& p, const float (&d)[BN / 2], uint8_t* staging,
                                            const void* zmap, int m0, int n0, int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int wg = tid / 128, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, rl = 16 * (warp % 4) + g;
  const int r0 = m0 + 64 * wg;
  // the boxes 1024-aligned (the 128-byte swizzle repeats every 8 rows: TMA swizzles by address bits 7–9)
  uint8_t* mine = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(staging) + 1023) & ~uintptr_t(1023)) +
                  wg * 2 * 8192;
  const auto bits = [](float a, float b) {
    const typename Element<OP>::T two[2] = {narrow<OP>(a), narrow<OP>(b)};
    return *reinterpret_cast<const uint32_t*>(two);
  };
#pragma unroll
  for (int q = 0; q < BN / 64; ++q) {
    uint8_t* box = mine + (q % 2) * 8192;
    if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(box);
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * q + jj;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(base + rl * 128 + (((jj ^ rl) & 7) << 4) + 4 * t),
                   "r"(bits(d[4 * j], d[4 * j + 1])) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(base + (rl + 8) * 128 + (((jj ^ (rl + 8)) & 7) << 4) + 4 * t),
                   "r"(bits(d[4 * j + 2], d[4 * j + 3])) : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, before TMA reads them
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
    if (tid % 128 == 0) {
      if (n0 + 64 * q < p.m && r0 < p.n)
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                     ::"l"((uint64_t)zmap), "r"(base), "r"(n0 + 64 * q), "r"(r0) : "memory");
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    }
  }
#endif
}
// run232: before the staging area's next writer (statistics, a merge): its stores have read it.
template <int THREADS>
__device__ __forceinline__ void z_tma_drained(int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
  epilogue_sync<THREADS>();
}

template <int BN, class Epi, bool DEFER = false>
__device__ __forceinline__ void epilogue_from_fragments('''

EDITS = {
    "common.cuh": [("  int z16 = 0;", "  int z_tma = 0;           // run232: Z′ (z16) stored by the TMA epilogue\n  int z16 = 0;")],
    "epilogue.cuh": [
        ("\ntemplate <int BN, class Epi, bool DEFER = false>\n__device__ __forceinline__ void epilogue_from_fragments(",
         ZTMA_STORE),
        ("                                                        float* out, int m0, int n0, int tid) {\n"
         "  constexpr int THREADS = 256, BM = 128,",
         "                                                        float* out, int m0, int n0, int tid,\n"
         "                                                        const void* zmap = nullptr) {\n"
         "  constexpr int THREADS = 256, BM = 128,"),
        ("  if (!Epi::kMerge) store_z();\n  bool last = false;\n",
         "  const bool ztma = p.z_tma && p.z16 && out == p.z && zmap && Epi::kStore == Store::kPlain;  // run232\n"
         "  if (!Epi::kMerge && !ztma) store_z();\n"
         "  if (ztma) z_tma_drained<THREADS>(tid);  // the staging area (this shared memory) read by its stores\n"
         "  bool last = false;\n"),
        ("  if (Epi::kMerge) store_z();\n  if (Epi::kMerge && last) merge_block<BM, BN, THREADS>(p, n0, tid);\n}",
         "  if (ztma) {  // run232: statistics and count done; Z′ by TMA from the same shared memory\n"
         "    epilogue_sync<THREADS>();\n"
         "    if (p.operand == OPERAND_BF16) store_z_tma<OPERAND_BF16, BN>(p, d, reinterpret_cast<uint8_t*>(smem), zmap, m0, n0, tid);\n"
         "    else store_z_tma<OPERAND_FP16, BN>(p, d, reinterpret_cast<uint8_t*>(smem), zmap, m0, n0, tid);\n"
         "    if (Epi::kMerge && last) z_tma_drained<THREADS>(tid);\n"
         "  } else if (Epi::kMerge) {\n"
         "    store_z();\n"
         "  }\n"
         "  if (Epi::kMerge && last) merge_block<BM, BN, THREADS>(p, n0, tid);\n}"),
    ],
    "gemm_wgmma.cuh": [
        ("  static constexpr size_t kBarrierOffset = kEpilogueOffset + fragment_smem_floats<BN>() * sizeof(float);",
         "  // run232: the epilogue's shared memory is also the TMA epilogue's staging area (32 KB, from the\n"
         "  // next 1024-byte boundary) where BN = 256\n"
         "  static constexpr size_t kEpilogueBytes =\n"
         "      BN == 256 && !PROMOTE ? 32768 + 1024 : fragment_smem_floats<BN>() * sizeof(float);\n"
         "  static_assert(fragment_smem_floats<BN>() * sizeof(float) <= kEpilogueBytes, \"the epilogue's words fit\");\n"
         "  static constexpr size_t kBarrierOffset = kEpilogueOffset + kEpilogueBytes;"),
        ("          merge_slice(p, epi, block, j0,",
         "          if (p.z_tma) z_tma_drained<256>(threadIdx.x - 128);  // run232\n"
         "          merge_slice(p, epi, block, j0,"),
        ("        else epilogue_from_fragments<BN, Epi, kUnits>(p, d, epi, out, m0, n0, threadIdx.x - 128);",
         "        else epilogue_from_fragments<BN, Epi, kUnits>(p, d, epi, out, m0, n0, threadIdx.x - 128, &map_b1);"),
        ("      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA\n    }\n  }\n#endif\n}",
         "      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA\n    }\n"
         "    if (p.z_tma && threadIdx.x % 128 == 0) asm volatile(\"cp.async.bulk.wait_group 0;\\n\" ::: \"memory\");  // run232\n"
         "  }\n#endif\n}"),
        ("      case OPERAND_BF16: return launch_wg<256, false, Epi, OPERAND_BF16>(p, out, a, b0, a, b0, st);\n"
         "      case OPERAND_FP16: return launch_wg<256, false, Epi, OPERAND_FP16>(p, out, a, b0, a, b0, st);",
         "      case OPERAND_BF16:  // run232: Z′'s map (the map_b1 slot, unused at tf32) for the TMA epilogue\n"
         "      case OPERAND_FP16: {\n"
         "        CUtensorMap zm = b0;\n"
         "        if (p.z_tma && (err = encode_map(&zm, p.z, p.n, p.m, 64, CU_TENSOR_MAP_SWIZZLE_128B, p.operand))) return err;\n"
         "        return p.operand == OPERAND_BF16 ? launch_wg<256, false, Epi, OPERAND_BF16>(p, out, a, b0, a, zm, st)\n"
         "                                         : launch_wg<256, false, Epi, OPERAND_FP16>(p, out, a, b0, a, zm, st);\n"
         "      }"),
    ],
    "04_fused.cu": [("    q.z16 = 1;\n",
                     "    q.z16 = 1;\n"
                     "    const char* ztma = std::getenv(\"FUSEDLIB_ZTMA\");  // run232: Z′ by the TMA epilogue\n"
                     "    q.z_tma = ztma && ztma[0] == '1' && q.m % 8 == 0 && (uintptr_t)q.z % 16 == 0;\n")],
}


def ztma_kernels(dest: Path) -> Path:
    """run214's copy (Z′ in 16 bits) with the TMA epilogue behind $FUSEDLIB_ZTMA."""
    run214.z16_kernels(dest)
    apply_edits(dest, EDITS)
    return dest


@torch.no_grad()
def smoke() -> None:
    """Small shapes, bf16 and fp16, 33 and 84: Z16 against Z16 + ZTMA (bits), and the package's."""
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    print("smoke: both extensions loaded", flush=True)
    for problem, n, k, m in (("33", 256, 256, 256), ("33", 300, 192, 264), ("84", 1000, 512, 1024), ("33", 520, 256, 776)):
        for dtype in (torch.bfloat16, torch.float16):
            ref = make_reference(problem, k, m, seed=0)
            mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(dtype)
            x = torch.randn(n, k, device="cuda", dtype=dtype)
            y0 = forward_keeping_buffers(eager_call(package, mod, "tf32"), x, mod.bn)
            y1 = forward_keeping_buffers(with_env(eager_call(copy, mod, "tf32"), z16=1), x, mod.bn)
            y2 = forward_keeping_buffers(with_env(eager_call(copy, mod, "tf32"), z16=1, ztma=1), x, mod.bn)
            torch.cuda.synchronize()
            print(f"smoke {problem} {n}x{k}->{m} {dtype}: ZTMA bits equal Z16's {torch.equal(y1[0], y2[0])}, buffers "
                  f"equal {torch.equal(y1[1], y2[1]) and torch.equal(y1[2], y2[2])}; against the package max |diff| / "
                  f"max |y| {((y2[0].float() - y0[0].float()).abs().max() / y0[0].float().abs().max()).item():.3g}, "
                  f"NaN {bool(torch.isnan(y2[0]).any())}", flush=True)


@torch.no_grad()
def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    checks, krows, rrows = [], [], []
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
        mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(torch.bfloat16)
        x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=torch.bfloat16)
        exact = copying.deepcopy(ref).to("cuda", torch.float64).train()(x.double())
        eager_err = rel(copying.deepcopy(ref).to("cuda", torch.bfloat16).train()(x), exact)
        w, b = ref.gemm.weight.cuda().bfloat16(), ref.gemm.bias.cuda().bfloat16()
        variants = {"fused": eager_call(package, mod, "tf32"), "Z16": with_env(eager_call(copy, mod, "tf32"), z16=1),
                    "Z16 + ZTMA": with_env(eager_call(copy, mod, "tf32"), z16=1, ztma=1),
                    "cuBLAS": lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)}
        outs = {v: forward_keeping_buffers(variants[v], x, mod.bn) for v in ("fused", "Z16", "Z16 + ZTMA")}
        row = dict(problem=problem, ztma_rel_err=rel(outs["Z16 + ZTMA"][0], exact), fused_rel_err=rel(outs["fused"][0], exact),
                   eager_rel_err=eager_err, ztma_bits_equal_z16=torch.equal(outs["Z16 + ZTMA"][0], outs["Z16"][0]),
                   buffers_equal_z16=all(torch.equal(outs["Z16 + ZTMA"][i], outs["Z16"][i]) for i in (1, 2, 3)))
        row["ztma_err_over_2_eager"] = row["ztma_rel_err"] / (2 * eager_err)
        checks.append(row)
        print(row, flush=True)
        krows += kernel_rounds(variants, x, problem=problem)
        rrows += round_robin_rows({v: variants[v] for v in ("fused", "Z16 + ZTMA", "cuBLAS")}, x,
                                  100 if problem == "39" else 200, problem=problem)
    report("run232", OUT, checks, krows, rrows)


if __name__ == "__main__":
    # The copy is written by `copy` only (a rewrite would give its files new times: ninja rebuilds).
    if sys.argv[1:] == ["copy"]:
        ztma_kernels(COPY)
    elif sys.argv[1:] == ["smoke"]:
        smoke()
    else:
        main()
