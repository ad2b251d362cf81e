#!/usr/bin/env bash
# run141 (H100; its split2 build failed on a static_assert, fixed and rerun in run142): (1) run139-simt-proto.py with split2 (interior copies from two running pointers, no
# per-row-group address across K steps) against pipe, split, cuBLAS SGEMM and the engine, then split2's
# Nsight Compute source counters; (2) the tf32 mainloop: Nsight Compute source counters and warp states of
# the fold stage's wgmma GEMM (plain BiasStore epilogue) and of cuBLAS's TF32 kernel at 84's shape.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
L=results/h100/logs
t0=$(date +%s)
VARIANTS=${VARIANTS:-pipe-bk8s3,split-s3,split2-s3} python $L/run139-simt-proto.py > $OUT/run141.log 2>&1
grep -v "^ptxas\|^    [0-9]* bytes\|UserWarning\|_warn_once" $OUT/run141.log | tail -30
echo "proto done ($(( $(date +%s) - t0 )) s)"
src() {  # name, kernel regex, command...
  local v=$1 k=$2; shift 2
  timeout 150 ncu --clock-control none -k "regex:$k" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o /tmp/ncu-$v "$@" > /tmp/ncu-$v.log 2>&1
  echo "ncu $v: rc=$?"; tail -1 /tmp/ncu-$v.log
  ncu -i /tmp/ncu-$v.ncu-rep --page source --csv --print-source sass > /tmp/src-$v.csv
  ncu -i /tmp/ncu-$v.ncu-rep --page details --csv > $OUT/details-$v.csv
  python $L/run138-src.py /tmp/src-$v.csv | tee $OUT/src-$v.log
}
src split2-s3 sgemm_pipe_kernel python $L/run139-simt-proto.py ncu split2-s3
TF32="
import sys, torch, fusedlib
from fusedlib.reference import PRESETS, make_reference
s = PRESETS['84']; x = torch.rand(s.batch, s.in_features, device='cuda')
if sys.argv[1] == 'cublas':
    torch.backends.cuda.matmul.allow_tf32 = True
    w = torch.randn(s.out_features, s.in_features, device='cuda'); b = torch.randn(s.out_features, device='cuda')
    f = lambda: torch.nn.functional.linear(x, w, b)
else:
    m = fusedlib.from_reference(make_reference('84', s.in_features, s.out_features, seed=0).cuda(), stage=sys.argv[1], precision='tf32')
    f = lambda: m(x)
with torch.no_grad():
    [f() for _ in range(4)]
torch.cuda.synchronize()"
src tf32-fold wgmma_gemm python -c "$TF32" fold
src tf32-cublas sm90_xmma python -c "$TF32" cublas
echo "done ($(( $(date +%s) - t0 )) s)"
