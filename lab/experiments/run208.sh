#!/usr/bin/env bash
# run208 (one H200 or H100; issue 32), on the tree with the swapped 3xTF32 GEMM (gemm_wgmma.cuh wg_swap,
# x_parts_kernel, epilogue.cuh epilogue_swapped) and run201-partials33.patch applied. Builds every
# stage and the backward (their cache back in parts), runs the GPU tests of the swap (the forced swap
# at odd shapes, the unswapped GEMM forced at the KernelBench shapes, every 3xTF32 case at the
# KernelBench shapes, where the swap is now the default, forward and gradients, and the reruns' bits),
# then run208-swap.py (each stage's forward swapped and not, against eager fp32).
# Returns run208.log, run208-swap.csv, run208-kernels.csv, flcache.part-* (about 5).
LOG=run208.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/build_all.sh  # every stage and the backward; the build cache back in parts
timeout 300 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -x \
  -k "wgmma-swap or wgmma-wsmem or (3xtf32 and 1024x8192) or reruns_are_bit_identical" > /tmp/t1.log 2>&1
say "swap tests: rc=$? $(tail -n 1 /tmp/t1.log) ($(( $(date +%s) - t0 )) s)"; grep -B5 -A30 "^E " /tmp/t1.log | head -80 >> $OUT/run208.log
timeout 200 python lab/experiments/run208-swap.py > /tmp/run208.out 2>&1
say "run208-swap: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 40 /tmp/run208.out | tee -a $OUT/run208.log
