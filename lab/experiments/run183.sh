#!/usr/bin/env bash
# run183 (one H200 or H100; results/h200/NOTES.md, "Next, in device calls"):
#   PART=a  on the tree as committed: build (the build cache back in parts, flcache.part-*: copy
#           them into .cache/ and carry .cache), the size sweeps appended to bench.csv (what run182
#           left), then run181-swap128.py (issue 32: the swap at a tile width that divides 1024)
#   PART=b  on a tree with lab/experiments/run181-sixteen-bit-operator.patch,
#           run183-sixteen-bit-backward.patch and run184-sixteen-bit-y.patch applied in that order
#           (here, not committed): build; the mixed, KernelBench and operator GPU tests (among them
#           the new bit-for-bit tests of the 16-bit backward passes and of the last pass's 16-bit
#           Y); run180-step16.py (a bf16 train step's kernels and host time, against run180's
#           964 µs of kernels and 1270 µs of host), run180-host16.py (the forward's) and
#           run184-host.py (where the step's host time goes: cProfile and torch.profiler's CPU side)
#   PART=c  on the tree as committed (the build cache carried): run184-epilogue-order.py, the
#           persistent GEMM's deferred count with one release fence after the CTA's barrier against
#           every thread's fence, the GEMM timed in the fused and sums (control) stages, bf16, tf32
#           and 3xtf32, bit for bit the same outputs
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
G=$(python -c "import torch; from fusedlib.lab.records import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
t0=$(date +%s)
ls .cache/flcache.part-* > /dev/null 2>&1 && cat .cache/flcache.part-* | tar xzf -
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "results/$G built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log
case ${PART:-a} in
  a) ls .cache/flcache.part-* > /dev/null 2>&1 || tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
     python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
       --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1
     echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)"; cp results/$G/bench.csv results/$G/sources.json $OUT/
     python lab/experiments/run181-swap128.py 2>&1 | grep -v Warning | tail -20
     echo "swap128: ($(( $(date +%s) - t0 )) s)" ;;
  b) timeout 300 python -m pytest -q -m gpu tests/test_mixed_precision.py tests/test_kernelbench_eval.py \
       tests/test_gpu_operator.py -p no:cacheprovider > $OUT/checks.log 2>&1
     echo "mixed + kernelbench + operator: $(tail -n 1 $OUT/checks.log) ($(( $(date +%s) - t0 )) s)"
     grep -h "^FAILED\|^E  " $OUT/checks.log | head -12
     python lab/experiments/run180-step16.py 2>&1 | grep -v Warning | tail -30
     python lab/experiments/run180-host16.py 2>&1 | grep -v Warning | tee $OUT/host16.log | tail -12
     python lab/experiments/run184-host.py > /dev/null 2>&1; echo "host profile: $(( $(date +%s) - t0 )) s" ;;
  c) python -c "import importlib.util as u, pathlib; s = u.spec_from_file_location('e', 'lab/experiments/run184-epilogue-order.py'); m = u.module_from_spec(s); s.loader.exec_module(m); m.edited_kernels(pathlib.Path('build/run184-kernels'))"
     for s in sums fused; do python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('$s', 0, Path('build/run184-kernels'))" > /tmp/build-e-$s.log 2>&1 & done
     wait; echo "edited built: $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-e-*.log && tail -20 /tmp/build-e-*.log
     python lab/experiments/run184-epilogue-order.py 2>&1 | grep -v Warning | tail -16 ;;
esac
