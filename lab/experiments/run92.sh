#!/usr/bin/env bash
# run92 (H100): the shift's data against its code (run92-diag.py), then the harness at 84 (run62.sh PART=84).
set -u
L=$PWD/results/h100/logs
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
PART=84 bash $L/run62.sh
timeout 150 python $L/run92-diag.py 2>&1 | grep -v -i warn | tee $OUT/diag.log
