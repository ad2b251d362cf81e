#!/usr/bin/env bash
# run89 (H100, prepared): the split count at v0 — the default plan (8 splits of ≥ 4 K steps: tf32
# 16 CTAs, 3xtf32 32) against 16 and 4 splits forced ($FUSEDLIB_WGMMA_SPLITK, which also forces
# 84's KernelBench shape to split: read its rows only for the default), forward kernel times by
# run87-time.py. Needs the stages built (FUSEDLIB_CACHE with a build of this tree).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD FUSEDLIB_CACHE=${FUSEDLIB_CACHE:-$PWD/build/flcache}
L=$PWD/results/h100/logs
timeout 100 python $L/run87-time.py default 2>&1 | grep -v -i warn | grep v0
FUSEDLIB_WGMMA_SPLITK=16 timeout 100 python $L/run87-time.py split16 2>&1 | grep -v -i warn | grep v0
FUSEDLIB_WGMMA_SPLITK=4 timeout 100 python $L/run87-time.py split4 2>&1 | grep -v -i warn | grep v0
