#!/usr/bin/env bash
# run142 (H100): (1) run139-simt-proto.py's split2 (run141's build failed on a static_assert) against pipe,
# split, cuBLAS SGEMM and the engine, and split2's Nsight Compute source counters; (2) the tf32 GEMM's gap
# to cuBLAS: cycles or clock (run142-clocks.py: kernel times, SM clock and power in sustained phases;
# Nsight Compute at its default locked base clock: elapsed cycles and duration of both kernels).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
L=results/h100/logs
t0=$(date +%s)
python $L/run142-clocks.py 2>&1 | grep -v -i warn | tee $OUT/run142-clocks.log
echo "clocks done ($(( $(date +%s) - t0 )) s)"
TF32="
import sys, torch, fusedlib
from fusedlib.reference import PRESETS, make_reference
s = PRESETS['84']; x = torch.rand(s.batch, s.in_features, device='cuda')
torch.backends.cuda.matmul.allow_tf32 = True
if sys.argv[1] == 'cublas':
    w = torch.randn(s.out_features, s.in_features, device='cuda'); b = torch.randn(s.out_features, device='cuda')
    f = lambda: torch.nn.functional.linear(x, w, b)
else:
    m = fusedlib.from_reference(make_reference('84', s.in_features, s.out_features, seed=0).cuda(), stage=sys.argv[1], precision='tf32')
    f = lambda: m(x)
with torch.no_grad():
    [f() for _ in range(6)]
torch.cuda.synchronize()"
for v in fold cublas fold cublas; do
  k=wgmma_gemm; [ $v = cublas ] && k=sm90_xmma
  timeout 100 ncu -k "regex:$k" --launch-skip 2 --launch-count 3 --section SpeedOfLight --csv python -c "$TF32" $v > /tmp/ncu-base-$v.csv 2>&1
  python -c "
import csv, sys
rows = [r for r in csv.reader(open('/tmp/ncu-base-$v.csv')) if len(r) > 10]
h = rows[0]; i = h.index('Metric Name'); j = h.index('Metric Value')
print('$v base clock:', '; '.join(r[i] + ' ' + r[j] for r in rows[1:] if r[i] in ('SM Frequency', 'Elapsed Cycles', 'Duration')))"
done | tee $OUT/run142-ncu-base.log
echo "ncu done ($(( $(date +%s) - t0 )) s)"
VARIANTS=${VARIANTS:-pipe-bk8s3,split-s3,split2-s3} python $L/run139-simt-proto.py > $OUT/run142.log 2>&1
grep -v "^ptxas\|^    [0-9]* bytes\|UserWarning\|_warn_once\|warning #\|^ *$\|detected during\|instantiation of\|for (int q\|\^$\|Remark" $OUT/run142.log | tail -24
echo "proto done ($(( $(date +%s) - t0 )) s)"
timeout 150 ncu --clock-control none -k "regex:sgemm_pipe_kernel" --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o /tmp/ncu-split2 python $L/run139-simt-proto.py ncu split2-s3 > /tmp/ncu-split2.log 2>&1
echo "ncu split2: rc=$?"; tail -1 /tmp/ncu-split2.log
ncu -i /tmp/ncu-split2.ncu-rep --page source --csv --print-source sass > /tmp/src-split2.csv
python $L/run138-src.py /tmp/src-split2.csv | tee $OUT/run142-src-split2.log
echo "done ($(( $(date +%s) - t0 )) s)"
