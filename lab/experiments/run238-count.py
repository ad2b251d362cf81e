"""run238 (prepared; one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): the persistent GEMM's tile
count handed to an idle warp. The fused stage's GEMM (statistics, merge units after the tiles) takes
28 µs more than the sums stage's (statistics only) at 39 in bf16 and 8–9 µs more at 84 and 33
(run235: 758.6 against 730.3 µs at 39), more than the sums stage's separate finalize kernel (13.4 µs
at 39, 6.1 at 84 and 33). One suspect is the count of each finished tile (epilogue.cuh count_tile):
all 256 consumer threads fence (membar.gl: each waits for its partials' writes to reach L2), meet,
and one adds to the column block's counter, with the tensor cores idle, some 15 times a CTA at 39.

A copy of the kernels (fusedlib.build.copy_kernels; the package's untouched) takes
$FUSEDLIB_COUNT at each call:
  0  as the package;
  1  the consumers meet (bar.sync orders the tile's partials before thread 0's hand-off), thread 0
     hands the column block to the producer warpgroup's warp 1 (idle in the tf32/16-bit GEMM) through
     a shared mbarrier (arrive: release at CTA scope) and goes on; warp 1 waits (acquire), fences at
     GPU scope and adds to the counter (CUTLASS's GenericBarrier pattern: a barrier, then one
     thread's fence and atomic), then frees the slot (a second mbarrier) for the next tile's count;
  2  the consumers meet and thread 0 adds with no fence at all: not correct by the memory model,
     timed only as the bound of what the fences cost.
The merge units are unchanged (they wait for the count with ld.acquire.gpu). Y and the running
buffers must be the package's bits in every mode (checked). Timed: the kernels of a train forward
(torch.profiler, three rounds) at 39, 84 and 33 in bf16 and tf32, the package's fused and sums
stages and cuBLAS beside the three modes; then whole forwards in rotated rounds.
`python run238-count.py copy` writes the copy; `smoke` runs mode 1 on small shapes (a hang costs a
minute: run it under a timeout). Writes $OUT/run238-*.csv."""
import os
import sys
from pathlib import Path

import torch

from fusedlib.build import load_stage
from fusedlib.reference import PRESETS

from ab import (eager_call, edited_copy, kernel_rounds, merge_edits, module_case, problem_knob,
                report, round_robin_rows, same_bits, smoke_cases, with_env)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run238-count")

HANDOFF = """// run238: the persistent GEMM's tile counts handed to the producer warpgroup's warp 1 (p.count_mode 1):
// one slot, two mbarriers (full: the consumers' thread 0 has written the column block; empty: warp 1
// has counted it), in static shared memory.
struct CountHandoff {
  unsigned long long full, empty;
  int block, handed;  // the column block to count (−1: no more); the hand-offs so far (thread 0's)
};
__device__ __forceinline__ CountHandoff& count_handoff() {
  __shared__ CountHandoff h;
  return h;
}
__device__ __forceinline__ void count_mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}
__device__ __forceinline__ void count_mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\\n.reg .pred P;\\nWAIT_%=:\\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\\n"
      "@!P bra WAIT_%=;\\n}\\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(parity) : "memory");
}
// The consumers' thread 0, after their barrier: column block `block` to warp 1 (−1: the end).
__device__ __forceinline__ void hand_count(int block) {
  CountHandoff& h = count_handoff();
  if (h.handed > 0) count_mbar_wait(&h.empty, (h.handed - 1) & 1);  // the last one counted: the slot is free
  h.block = block;
  ++h.handed;
  count_mbar_arrive(&h.full);  // (release: the slot, and what the barrier ordered before it)
}
// Warp 1's lane 0: count each handed tile on its column block's counter until the end.
__device__ __forceinline__ void count_handed(unsigned int* counters) {
  CountHandoff& h = count_handoff();
  for (int k = 0;; ++k) {
    count_mbar_wait(&h.full, k & 1);  // (acquire)
    const int b = h.block;
    if (b < 0) return;
    __threadfence();  // the tile's partials device-wide (cumulative: ordered before the hand-off)
    atomicAdd(counters + b, 1u);
    count_mbar_arrive(&h.empty);
  }
}

// Count a finished tile"""

EDITS = {
    "epilogue.cuh": [
        ("// Count a finished tile", HANDOFF),
        ("""  const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM);
  __threadfence();  // this tile's partials visible device-wide before it is counted""",
         """  const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM);
  if constexpr (DEFER) {
    if (p.count_mode != 0) {  // run238: 1 handed to warp 1, 2 no fence (a bound)
      epilogue_sync<THREADS>();  // the tile's partials written (CTA order) before thread 0 goes on
      if (tid == 0) {
        if (p.count_mode == 1) hand_count(col_block);
        else atomicAdd(p.counters + col_block, 1u);
      }
      return false;
    }
  }
  __threadfence();  // this tile's partials visible device-wide before it is counted""")],
    "gemm_wgmma.cuh": [
        ("""    asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");""",
         """    if (kUnits && p.count_mode == 1) {  // run238
      CountHandoff& h = count_handoff();
      mbar_init(reinterpret_cast<uint64_t*>(&h.full), 1);
      mbar_init(reinterpret_cast<uint64_t*>(&h.empty), 1);
      h.handed = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");"""),
        ("""    } else if constexpr (PROMOTE && !SWAP) {  // warps 1–3""",
         """    } else if (kUnits && p.count_mode == 1 && threadIdx.x == 32) {  // run238: warp 1 counts the tiles
      count_handed(p.counters);
    } else if constexpr (PROMOTE && !SWAP) {  // warps 1–3"""),
        ("""    if (OP != OPERAND_FP32 && wg_z_tma(p) && threadIdx.x % 128 == 0)  // Z's last stores done before the CTA ends""",
         """    if (kUnits && p.count_mode == 1 && threadIdx.x == 128) hand_count(-1);  // run238: warp 1's end
    if (OP != OPERAND_FP32 && wg_z_tma(p) && threadIdx.x % 128 == 0)  // Z's last stores done before the CTA ends"""),
    ],
}
EDITS = merge_edits(problem_knob("run238", "count_mode", "FUSEDLIB_COUNT"), EDITS)

MODES = {"count: package": "0", "count: warp 1": "1", "count: no fence (bound)": "2"}
PRECISIONS = ("bf16", "tf32")


def count_kernels(dest: Path) -> Path:
    """A copy of the kernels with the count's modes, chosen by $FUSEDLIB_COUNT."""
    return edited_copy(dest, EDITS)


def bit_checks(package, copy, mod, x, **labels) -> dict:
    """Y and the running buffers of each mode against the package's fused stage, bit for bit."""
    row = dict(labels, **same_bits(eager_call(package, mod, "tf32"),
                                   {name: with_env(eager_call(copy, mod, "tf32"), count=mode) for name, mode in MODES.items()},
                                   x, mod.bn))
    print(row, flush=True)
    return row


def smoke() -> None:
    """Every mode on small shapes (partial tiles; 84 and 33; bf16 and tf32), bits against the package's:
    required of the package's count and warp 1's."""
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    for labels, mod, x in smoke_cases(PRECISIONS):
        row = bit_checks(package, copy, mod, x, **labels)
        assert row["count: package"] and row["count: warp 1"], row  # (no fence: reported, not required)


def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    checks, krows, rrows = [], [], []
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        for precision in PRECISIONS:
            label = f"{problem} {precision}"
            shape = (sh.batch, sh.in_features, sh.out_features)
            mod, x = module_case(problem, shape, precision)
            checks.append(bit_checks(package, copy, mod, x, problem=label))
            w, b = mod.gemm.weight, mod.gemm.bias
            variants = {"fused": eager_call(package, mod, "tf32"), "sums": module_case(problem, shape, precision, "sums")[0],
                        **{name: with_env(eager_call(copy, mod, "tf32"), count=mode) for name, mode in MODES.items()},
                        "cuBLAS": lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)}
            with torch.no_grad():
                krows += kernel_rounds(variants, x, problem=label)
                rrows += round_robin_rows({v: variants[v] for v in ("fused", "count: warp 1", "sums", "cuBLAS")}, x,
                                          100 if problem == "39" else 200, problem=label)
    report("run238", OUT, checks, krows, rrows)


if __name__ == "__main__":
    # The copy is written by `copy` only (a rewrite would give its files new times: ninja rebuilds).
    if sys.argv[1:] == ["copy"]:
        count_kernels(COPY)
    elif sys.argv[1:] == ["smoke"]:
        smoke()
    else:
        main()
