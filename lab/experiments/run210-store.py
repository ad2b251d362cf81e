"""run210 (prepared; one H100 or H200; issue 36): is the store of Z′ what the bf16 GEMM's epilogue
exposes? run204/run207 put our wgmma GEMM's once-a-call part a at 16.7 µs with the bias store (naive,
eval) against cuBLAS's 10.0 with a float32 Z and 6.3 with a bf16 Z, the mainloop at cuBLAS's rate.
Our consumers store Z′ from their registers (st.global, 8 bytes a thread an instruction) and start
the next tile's mainloop only once every store has issued; cuBLAS stages its tile in shared memory
and hands it to TMA (cp.async.bulk.tensor), whose stores drain under the next tile's mainloop. This
experiment builds, from a copy of the kernels (fusedlib.build.copy_kernels; the package's kernels
untouched), the naive and sums stages with the epilogue's stores of Z′ removed ("nostore": the
output is not written; for timing only) and fits t = a + b·K of the bf16 GEMM (batch 1024, 8192
features, K 2048 … 16384, torch.profiler per kernel, 10 calls after an L2 flush each) for the
package's kernels and the copy's. If "nostore" takes a down to cuBLAS's, a TMA-store epilogue is the
lever (the store drained under the next tile's mainloop); if not, the epilogue's other work is.
A third copy, "tmastore", is that lever as a draft: the tf32 / 16-bit kernel (not 3xTF32) stages each
consumer warpgroup's 64 × 32 part of the tile in shared memory (8 KB each, 128-byte swizzled, after
the barriers: 227 328 bytes in all), fences it for the async proxy and hands it to one thread's
cp.async.bulk.tensor store, waiting only for the bulk store to have read the buffer before it is
written again (cp.async.bulk.wait_group.read), and for every store to complete before the CTA exits.
Its output must equal the package's bit for bit (checked first). Writes $OUT/run210-store.csv;
prints the lines. About 6 minutes with the three builds."""
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))
STORE_LOOP = """    if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
    if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);"""


def nostore_kernels(dest: Path) -> Path:
    """A copy of the kernels whose fragment epilogue computes every value but stores none."""
    copy_kernels(dest)
    path = dest / "epilogue.cuh"
    src = path.read_text()
    assert src.count(STORE_LOOP) == 1
    # keep the values live (an empty asm that reads them) so that the arithmetic is not removed
    path.write_text(src.replace(STORE_LOOP, '    asm volatile("" ::"f"(v0), "f"(v1), "f"(v2), "f"(v3));'))
    return dest


TMA_STORE = """    if (map_out) {  // run210 draft: through a 64 × 32 staging tile a warpgroup, TMA's bulk store
      const int wgi = warp >> 2, rl = 16 * (warp & 3) + g;  // the warpgroup, the row in its 64
      float* stg = staging + wgi * 64 * 32;
      if (j % 4 == 0) {  // the previous bulk store has read the buffer
        if ((tid & 127) == 0) asm volatile("cp.async.bulk.wait_group.read 0;\\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\\n" ::"r"(3 + wgi) : "memory");
      }
      const int q = 2 * (j % 4) + (t >> 1);  // the 16-byte chunk of the row's 128 bytes (128B swizzle)
      *reinterpret_cast<float2*>(stg + rl * 32 + ((q ^ (rl & 7)) << 2) + ((t & 1) << 1)) = make_float2(v0, v1);
      *reinterpret_cast<float2*>(stg + (rl + 8) * 32 + ((q ^ (rl & 7)) << 2) + ((t & 1) << 1)) = make_float2(v2, v3);
      if (j % 4 == 3) {
        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\\n" ::"r"(3 + wgi) : "memory");
        if ((tid & 127) == 0) {
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\\n"
                       ::"l"(map_out), "r"(n0 + 32 * (j / 4)), "r"(m0 + 64 * wgi),
                       "r"((uint32_t)__cvta_generic_to_shared(stg)) : "memory");
          asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");
        }
      }
    } else {
""" + STORE_LOOP + """
    }"""


def tmastore_kernels(dest: Path) -> Path:
    """A copy of the kernels whose tf32 / 16-bit wgmma GEMM stores its tiles through shared memory
    and TMA (the module docstring)."""
    copy_kernels(dest)
    epi = dest / "epilogue.cuh"
    src = epi.read_text()
    for old, new in (
            ("""                                                        float* out, int m0, int n0, int tid) {
  constexpr int THREADS = 256, BM = 128, NV = BN / 4""",
             """                                                        float* out, int m0, int n0, int tid,
                                                        const void* map_out = nullptr, float* staging = nullptr) {
  constexpr int THREADS = 256, BM = 128, NV = BN / 4"""),
            (STORE_LOOP, TMA_STORE)):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    epi.write_text(src)
    gemm = dest / "gemm_wgmma.cuh"
    src = gemm.read_text()
    for old, new in (
            ("""  static constexpr size_t kSmem = 1024 + kBarrierOffset + (PROMOTE ? 3 : 2) * kStages * sizeof(uint64_t) + 16 + 16;""",
             """  static constexpr size_t kEnd = kBarrierOffset + (PROMOTE ? 3 : 2) * kStages * sizeof(uint64_t) + 16 + 16;
  static constexpr size_t kStagingOffset = (kEnd + 1023) / 1024 * 1024;  // tf32 / 16-bit: 2 × 64 × 32 floats
  static constexpr size_t kSmem = 1024 + (PROMOTE ? kEnd : kStagingOffset + 2 * 64 * 32 * sizeof(float));"""),
            ("""                   const __grid_constant__ CUtensorMap map_b1) {""",
             """                   const __grid_constant__ CUtensorMap map_b1, const __grid_constant__ CUtensorMap map_out,
                   int tma_store) {"""),
            ("""epilogue_from_fragments<BN, Epi, kUnits>(p, d, epi, out, m0, n0, threadIdx.x - 128);""",
             """epilogue_from_fragments<BN, Epi, kUnits>(p, d, epi, out, m0, n0, threadIdx.x - 128,
                                                      !PROMOTE && tma_store ? &map_out : nullptr,
                                                      reinterpret_cast<float*>(smem + T::kStagingOffset));"""),
            ("""      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }
  }
#endif""",
             """      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }
    if (!PROMOTE && tma_store && threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group 0;\\n" ::: "memory");
  }
#endif"""),
            ("""  kernel<<<wg_persistent(PROMOTE) ? persistent_grid(units) : units, kWgThreads, WgTile<BN, PROMOTE>::kSmem, st>>>(
      p, out, a, b0, row0, b1);""",
             """  CUtensorMap mo = b0;  // Z's map for the bulk stores: N × M float32 in boxes of 64 rows × 32
  const int tma = !PROMOTE && p.m % 4 == 0 && (uintptr_t)out % 16 == 0 && !encode_map(&mo, out, p.n, p.m, 64);
  kernel<<<wg_persistent(PROMOTE) ? persistent_grid(units) : units, kWgThreads, WgTile<BN, PROMOTE>::kSmem, st>>>(
      p, out, a, b0, row0, b1, mo, tma);""")):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    gemm.write_text(src)
    return dest


COPIES = {"nostore": Path("build/run210-nostore"), "tmastore": Path("build/run210-tmastore")}


def main() -> None:
    copy, tma = COPIES["nostore"], COPIES["tmastore"]
    rows = []
    batch, m = 1024, 8192
    for k in (2048, 4096, 8192, 16384):
        ref = make_reference("84", k, m, seed=0)
        x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
        for stage, mode in (("naive", "eval"), ("sums", "train")):
            mod = from_reference(ref, stage=stage, precision="tf32").to(torch.bfloat16).cuda()
            mod.train(mode == "train")
            t = mod._tensors()
            exts = (("as is", load_stage(stage)), ("nostore", load_stage(stage, 0, copy)),
                    ("tmastore", load_stage(stage, 0, tma)))
            if k == 2048:  # the draft's output, bit for bit the package's
                with torch.no_grad():
                    want, got = (e.eager_forward(x, *t, mod._kind, mod._precision, mod.training, mod.bn.eps,
                                                 mod.bn.momentum) for _, e in (exts[0], exts[2]))
                print(stage, mode, "tmastore bit-identical:", torch.equal(want, got), flush=True)
            for label, ext in exts:
                def call(x, ext=ext, mod=mod, t=t):
                    return ext.eager_forward(x, *t, mod._kind, mod._precision, mod.training, mod.bn.eps, mod.bn.momentum)
                with torch.no_grad():
                    ker = profile_kernels(call, x, calls=10)
                gemm = [r for r in ker if "wgmma_gemm" in r[0]]
                rows.append(dict(k=k, who=f"{stage} {mode} {label}", us=sum(r[2] for r in gemm)))
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run210-store.csv", index=False)
    print(df.pivot_table(index="k", columns="who", values="us").round(1).to_string())
    for who, g in df.groupby("who"):
        b, a = np.polyfit(g.k, g.us, 1)
        print(f"{who:22s}: a = {a:6.2f} µs, b = {b * 1024:7.3f} µs per 1024 of K")


if __name__ == "__main__":
    if sys.argv[1:] == ["copies"]:  # (run210.sh: the two copies written, then built side by side)
        nostore_kernels(COPIES["nostore"]), tmastore_kernels(COPIES["tmastore"])
    else:
        main()
