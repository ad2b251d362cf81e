#!/usr/bin/env bash
# run265 (one H200; issue 36, item 5; branch `narrow` = main + run264-idlecount.patch + the tf32 /
# 16-bit wgmma GEMM's narrow tile, about 9 minutes, no build carried): the narrow tile (128 × 64,
# gemm_wgmma.cuh wg_tile_width) where 128 × 256 tiles fill less than a quarter of the SMs (KernelBench
# v0, 128 × 1024 → 512: 8 tiles instead of 2), against main's kernels built in the same call
# (lab/experiments/run264-main.tgz: `git archive main fusedlib pyproject.toml`), and the branch with
# the wide tile forced (FUSEDLIB_WGMMA_WIDTH=256: the count patch alone) and with the split-K count
# forced to 1, 2 and 4; then 39 (the count patch's shape) main against the branch, and 84 on the
# branch. Train, bf16 and tf32, the fused and sums stages and cuBLAS's GEMM alone, kernels profiled.
# Then the branch's GPU checks of the two widths: tests/test_gpu.py (each width forced where the other
# is the default, the widths' bits, the persistent grids, v0's forward cases), tests/
# test_mixed_precision.py's 16-bit path cases on wgmma (both widths), the sanitizer; record left out.
LOG=run265.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say
. lab/experiments/ab.sh  # build_ab, bench
build_ab naive fold sums fused bwd
for problem in 84 33; do
  bench main /tmp/main $problem v0
  bench branch $PWD $problem v0
  bench wide $PWD $problem v0 FUSEDLIB_WGMMA_WIDTH=256
done
for s in 1 2 4; do bench s$s $PWD 84 v0 FUSEDLIB_WGMMA_SPLITK=$s; done
bench main /tmp/main 39 39
bench branch $PWD 39 39
bench branch $PWD 84 84
python lab/experiments/run265-table.py $OUT/ab | tee -a $OUT/$LOG
left() { echo $(( 585 - ($(date +%s) - t0) )); }
export FUSEDLIB_VALIDATION_OUT=/tmp/v.json FUSEDLIB_GPU_PROBLEMS=84,33
timeout $(( $(left) - 150 )) python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "wgmma-wide or wgmma-narrow or tile_widths or persistent_grid or (case_matches and v0 and tf32)" > $OUT/tests.log 2>&1
say "test_gpu: rc=$? $(tail -n 1 $OUT/tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/tests.log | head -8 | tee -a $OUT/$LOG
timeout $(( $(left) - 40 )) python -m pytest -m gpu -q -p no:cacheprovider tests/test_mixed_precision.py \
  -k "each_path and wgmma and bfloat16" > $OUT/mixed.log 2>&1
say "mixed: rc=$? $(tail -n 1 $OUT/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/mixed.log | head -8 | tee -a $OUT/$LOG
timeout $(left) python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k sanitizer > $OUT/sanitizer.log 2>&1
say "sanitizer: rc=$? $(tail -n 1 $OUT/sanitizer.log) ($(( $(date +%s) - t0 )) s)"
(cd $OUT && tar czf ab.tgz ab && rm -rf ab)
