"""run244 (prepared; one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): where the fused GEMM's time over
the sums GEMM goes. The fused stage's persistent GEMM (statistics, each tile counted on its column
block, merge units after the tiles) took 27 µs more than the sums stage's (statistics only) at 39
in bf16 and 9.5 more at 84 and 33 (run240b: 764.9 against 737.7 µs at 39). run238 timed the count
with no fence as a bound: at most 4 µs of it are the fences. What is left is either the merge
units (their wait for the last tiles, then their loads and merges, after the tiles: a tail) or the
fused epilogue's code beside the sums one (the count's barrier and atomic a tile, its registers).

A copy of the kernels (fusedlib.build.copy_kernels; the package's untouched) takes
$FUSEDLIB_UNITS at each call:
  0  as the package;
  1  the merge units wait for their column block's tiles and count themselves as the package's do
     (the counters come back to zero), but merge nothing: the units' merges out of the time;
  2  no count and no merge units (the counters untouched): the sums GEMM's epilogue plus the
     fused one's code around it.
Modes 1 and 2 leave the BatchNorm coefficients and running buffers unwritten: their Y is not
checked, only mode 0's bits against the package's. Timed: the forward's kernels (torch.profiler,
three rounds) at 39, 84 and 33 in bf16 and tf32, beside the package's fused and sums stages and
cuBLAS (F.linear). `python run244-units.py copy` writes the copy; `smoke` checks mode 0's bits on
small shapes and that modes 1 and 2 run and leave the counters usable (a mode-0 call after them
gives the package's bits). Writes $OUT/run244-*.csv."""
import os
import sys
from pathlib import Path

import torch

from fusedlib.build import load_stage
from fusedlib.reference import PRESETS

from ab import (eager_call, edited_copy, kernel_rounds, merge_edits, module_case, problem_knob,
                report, same_bits, smoke_cases, with_env)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run244-units")

EDITS = {
    "epilogue.cuh": [
        ("""  const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM);
  __threadfence();  // this tile's partials visible device-wide before it is counted""",
         """  const int col_block = n0 / BN, row_tiles = ceil_div(p.n, BM);
  if (DEFER && p.units_mode == 2) return false;  // run244: no count
  __threadfence();  // this tile's partials visible device-wide before it is counted"""),
        ("""  __threadfence();
  merge_columns(p, smem, j0, cols, tile_rows, tid);""",
         """  __threadfence();
  if (p.units_mode == 0) merge_columns(p, smem, j0, cols, tile_rows, tid);  // run244: 1 merges nothing"""),
    ],
    "gemm_wgmma.cuh": [
        ("""  const int all_units = units + (kUnits ? ceil_div(p.m, 64) : 0);""",
         """  const int all_units = units + (kUnits && p.units_mode != 2 ? ceil_div(p.m, 64) : 0);  // run244: 2 none"""),
    ],
}
EDITS = merge_edits(problem_knob("run244", "units_mode", "FUSEDLIB_UNITS"), EDITS)

MODES = {"units: package": "0", "units: no merges": "1", "no count, no units": "2"}
PRECISIONS = ("bf16", "tf32")


def units_kernels(dest: Path) -> Path:
    """A copy of the kernels with the merge units' modes, chosen by $FUSEDLIB_UNITS."""
    return edited_copy(dest, EDITS)


def bit_check(package, copy, mod, x, **labels) -> dict:
    """Mode 0's Y and running buffers against the package's fused stage, bit for bit, then again
    after a call in each other mode (their counters must come back as mode 0 needs them)."""
    want, mode0 = eager_call(package, mod, "tf32"), with_env(eager_call(copy, mod, "tf32"), units="0")
    row = dict(labels, **same_bits(want, {"units: package": mode0}, x, mod.bn))
    for name, mode in list(MODES.items())[1:]:
        with torch.no_grad():
            saved = [b.clone() for b in (mod.bn.running_mean, mod.bn.running_var, mod.bn.num_batches_tracked)]
            with_env(eager_call(copy, mod, "tf32"), units=mode)(x)
            for b, s in zip((mod.bn.running_mean, mod.bn.running_var, mod.bn.num_batches_tracked), saved):
                b.copy_(s)
        row[f"package after {name}"] = same_bits(want, {"m": mode0}, x, mod.bn)["m"]
    print(row, flush=True)
    return row


def smoke() -> None:
    """Mode 0's bits on small shapes (partial tiles; 84 and 33; bf16 and tf32), and after the others."""
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    for labels, mod, x in smoke_cases(PRECISIONS):
        row = bit_check(package, copy, mod, x, **labels)
        assert all(v for k, v in row.items() if k.startswith(("units", "package"))), row


def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    checks, krows = [], []
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        for precision in PRECISIONS:
            label = f"{problem} {precision}"
            shape = (sh.batch, sh.in_features, sh.out_features)
            mod, x = module_case(problem, shape, precision)
            checks.append(bit_check(package, copy, mod, x, problem=label))
            w, b = mod.gemm.weight, mod.gemm.bias
            sums = module_case(problem, shape, precision, "sums")[0]
            variants = {"fused": eager_call(package, mod, "tf32"), "sums": eager_call(load_stage("sums"), sums, "tf32"),
                        **{name: with_env(eager_call(copy, mod, "tf32"), units=mode) for name, mode in MODES.items()},
                        "cuBLAS": lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)}
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"  # cuBLAS's peer at the GEMM's precision
            with torch.no_grad():
                krows += kernel_rounds(variants, x, problem=label)
    report("run244", OUT, checks, krows, [])


if __name__ == "__main__":
    # The copy is written by `copy` only (a rewrite would give its files new times: ninja rebuilds).
    if sys.argv[1:] == ["copy"]:
        units_kernels(COPY)
    elif sys.argv[1:] == ["smoke"]:
        smoke()
    else:
        main()
