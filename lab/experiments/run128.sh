#!/usr/bin/env bash
# run128 (H100): the engine's naive stage built in the background, while the SIMT prototype (run128-simt-proto.py) builds and checks,
# in one process against cuBLAS SGEMM and the engine.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
python -c "from fusedlib.build import load_stage; load_stage('naive')" > $OUT/build-naive.log 2>&1 &
python lab/experiments/run128-simt-proto.py 2>&1 | tee $OUT/run128.log | grep -v "^ptxas\|^    0 bytes"
