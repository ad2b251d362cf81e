#!/usr/bin/env bash
# run126 (H100): split-K on the SIMT GEMM. Build every stage, then the GPU cases it touches (the
# forced 3-split cases, fp32 at v0 which now splits on its own, reruns bit-identical incl. v0,
# non-finite inputs), memcheck/racecheck of the split-K SIMT GEMM, then run126-simt-splitk.py.
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log
python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -x \
  -k "simt-splitk3 or (v0 and fp32 and test_case) or bit_identical or non_finite" 2>&1 | tail -8 | tee $OUT/tests.log
echo "tests: $(( $(date +%s) - t0 )) s"
for tool in memcheck racecheck; do
  FUSEDLIB_SIMT_SPLITK=3 compute-sanitizer --tool $tool python -c "
import torch, fusedlib
from fusedlib.reference import make_reference
for problem in ('84', '33'):
  for n, k, m in ((130, 264, 300), (128, 1024, 512), (7, 33, 65)):
    for stage in fusedlib.algebra.STAGES:
      f = fusedlib.from_reference(make_reference(problem, k, m, seed=0).cuda(), stage=stage, precision='fp32')
      x = torch.rand(n, k, device='cuda')
      with torch.no_grad():
        f(x); f(x); f.eval(); f(x)
torch.cuda.synchronize()" 2>&1 | grep -E "SUMMARY|Error" | head -5 | sed "s/^/$tool: /" | tee -a $OUT/sanitizer.log
done
echo "sanitizer: $(( $(date +%s) - t0 )) s"
python lab/experiments/run126-simt-splitk.py 2>&1 | tee $OUT/run126.log | tail -30
echo "total $(( $(date +%s) - t0 )) s"
