#!/usr/bin/env bash
# run136–run137 (H100; the tree of branch cluster-multicast): build this tree's sums + fused stages and main's fused stage (run136-ab.py), the
# clusters' A/B, then the GPU tests of the persistent GEMM (TESTS: pytest's -k; run136: grid sizes and
# clusters bit-identical, the wgmma forward cases of the fused stage; run137: the grid sizes), and
# (NCU=1) the clustered GEMM's launch in Nsight Compute.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
t0=$(date +%s)
for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
python $L/run136-ab.py build-main > $OUT/build-main.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log && tail -30 $OUT/build-*.log
PROFILE=1 timeout 240 python $L/run136-ab.py time 2>&1 | grep -v -i warn | tee $OUT/ab.log
echo "A/B done ($(( $(date +%s) - t0 )) s)"
timeout 200 python -m pytest -q -x tests/test_gpu.py -k "${TESTS:-persistent_grid or (wgmma and tf32 and fused)}" -p no:cacheprovider 2>&1 | tail -15 | tee $OUT/tests.log
if [ -n "${NCU:-}" ]; then
  timeout 120 ncu --section LaunchStats --section Occupancy --section SpeedOfLight -k regex:wgmma_gemm --launch-skip 2 --launch-count 1 \
    python -c "
import torch, fusedlib
from fusedlib.reference import PRESETS, make_reference
s = PRESETS['84']; ref = make_reference('84', s.in_features, s.out_features, seed=0).cuda()
m = fusedlib.from_reference(ref, stage='fused', precision='tf32'); x = torch.rand(s.batch, s.in_features, device='cuda')
with torch.no_grad():
    [m(x) for _ in range(3)]
torch.cuda.synchronize()" > $OUT/ncu.log 2>&1; grep -i "cluster\|grid size\|duration\|waves\|throughput" $OUT/ncu.log | head -30
fi
tar czf $OUT/flcache-tree.tgz build/flcache
echo "done ($(( $(date +%s) - t0 )) s)"
