#!/usr/bin/env bash
# run152: the variants of run152-variants.py built side by side, then timed in turn, two rounds.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache-v PYTHONUNBUFFERED=1 FUSEDLIB_WGMMA_WSPLIT=smem
t0=$(date +%s)
V="v0 nowait nosplit reorder"
for v in $V; do python lab/experiments/run152-variants.py build $v > /tmp/b152-$v.log 2>&1 & done
wait; echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/b152-*.log && tail -20 /tmp/b152-*.log
for round in 1 2; do for v in $V; do timeout 60 python lab/experiments/run152-variants.py time $v; done; done 2>&1 | tee $OUT/run152.log
echo "done in $(( $(date +%s) - t0 )) s"
