#!/usr/bin/env bash
# run249 (one H200 or H100; about 40 s): 84's 16-bit row pass against candidate kernels, standalone
# (run249_softmax.patch: run249_softmax.cu, which includes the package's passes.cuh: its "package"
# row is the kernel of the tree it runs on). Writes $OUT/run249.log. `run249.sh build`: /tmp/run249 alone.
set -u
python -c "import sys; from pathlib import Path; sys.path.insert(0, 'lab/experiments'); from ab import add_patch_files
add_patch_files(Path('/tmp'), Path('lab/experiments/run249_softmax.patch'))" || exit 1
nvcc -O3 -std=c++17 -arch=sm_90a -I fusedlib/kernels -o /tmp/run249 /tmp/run249_softmax.cu || exit 1
[ "${1:-}" = build ] && exit 0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee $OUT/run249.log
/tmp/run249 1024 8192 | tee -a $OUT/run249.log
