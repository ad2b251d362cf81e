#!/usr/bin/env bash
# run144 (H100; the tree of branch cluster-multicast): the cycles behind run143's energies. Nsight Compute at
# its default locked base clock, three calls each, two rounds: the fused stage's eval forward at 33's shape
# (one kernel: the tf32 GEMM with its affine epilogue) with clusters of two (pair) and without
# ($FUSEDLIB_WGMMA_CLUSTER=1, single), and cuBLAS's TF32 F.linear: SM clock, elapsed cycles, duration,
# L2 and DRAM throughput.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
[ -d build/flcache ] || tar xzf .cache/flcache.tgz
t0=$(date +%s)
python -c "from fusedlib.build import load_stage; load_stage('fused')" > $OUT/build.log 2>&1; tail -3 $OUT/build.log
echo "built ($(( $(date +%s) - t0 )) s)"
PY="
import os, sys, torch, fusedlib
from fusedlib.reference import PRESETS, make_reference
s = PRESETS['33']; x = torch.rand(s.batch, s.in_features, device='cuda')
torch.backends.cuda.matmul.allow_tf32 = True
m = fusedlib.from_reference(make_reference('33', s.in_features, s.out_features, seed=0).cuda().eval(), stage='fused', precision='tf32').eval()
w, b = m.gemm.weight.detach(), m.gemm.bias.detach()
f = (lambda: torch.nn.functional.linear(x, w, b)) if sys.argv[1] == 'cublas' else (lambda: m(x))
with torch.no_grad():
    [f() for _ in range(6)]
torch.cuda.synchronize()"
for r in 1 2; do for v in pair single cublas; do
  k=wgmma_gemm; [ $v = cublas ] && k=sm90_xmma
  if [ $v = single ]; then export FUSEDLIB_WGMMA_CLUSTER=1; else unset FUSEDLIB_WGMMA_CLUSTER; fi
  timeout 100 ncu -k "regex:$k" --launch-skip 2 --launch-count 3 --section SpeedOfLight --section LaunchStats --csv python -c "$PY" $v > /tmp/ncu-$v.csv 2>&1
  python -c "
import csv
rows = [r for r in csv.reader(open('/tmp/ncu-$v.csv')) if len(r) > 10]
h = rows[0]; i = h.index('Metric Name'); j = h.index('Metric Value'); c = h.index('ID')
want = ('SM Frequency', 'Elapsed Cycles', 'Duration', 'L2 Cache Throughput', 'DRAM Throughput', 'Cluster Size', 'Grid Size')
for call in sorted({r[c] for r in rows[1:]}):
    print('$v', call, '; '.join(r[i] + ' ' + r[j] for r in rows[1:] if r[c] == call and r[i] in want))"
done; done | tee $OUT/run144.log
echo "done ($(( $(date +%s) - t0 )) s)"
