#!/usr/bin/env bash
# run90, run91 (H100): the first-row shift in the kernels (train mode at fp32 and 3xTF32) — the whole
# GPU suite (run62.sh PART=suite: build, validation.json) and the shift's cost (run90-time.py).
set -u
L=$PWD/results/h100/logs
PART=suite bash $L/run62.sh
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache
timeout 120 python $L/run90-time.py 2>&1 | grep -v -i warn | tee $OUT/time.log
