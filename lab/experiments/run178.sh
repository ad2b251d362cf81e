#!/usr/bin/env bash
# run178 (one H100): the 16-bit tensor-core kernels (bf16/fp16 operands on wgmma and mma.sync).
#   PART=a (default)  build; the mixed-precision GPU cases (tests/test_mixed_precision.py -m gpu: every
#                     stage on each path at edge shapes, the route taken, a misaligned operand, torch.compile);
#                     then float32 regressions (the operator tests, the wgmma/mma GPU cases of 84's fused stage);
#                     then run178-time.py (speed at the KernelBench shapes)
#   PART=c            the backward's merge 4 ahead: build this tree and .old/ (the tree with common.cuh before the change,
#                     made here), the gradients part of the GPU suite on this tree, run178-merge.py in both
#   PART=b            build; float32 regressions on these kernels: the GPU suite's parts forward-84b,
#                     forward-33b, gradients and training side by side, then KernelBench's GPU tests
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
if [ "${PART:-a}" = c ]; then
  rm -rf .old && mkdir .old && tar cf - --exclude=./.old --exclude=./build . | tar xf - -C .old
  (cd .old && patch -p1 -s < ../lab/experiments/run178-merge-before.patch)  # common.cuh's merge as before the change
  for d in . .old; do
    (cd $d && FUSEDLIB_CACHE=$PWD/build/flcache PYTHONPATH=$PWD python -c "from fusedlib.build import load_stage, load_backward; load_stage('fused'); load_backward()") > $OUT/build-c-$(basename $PWD$d).log 2>&1 &
  done
  wait; echo "built in $(( $(date +%s) - t0 )) s" | tee -a $OUT/c.log
  for s in naive fold sums; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /dev/null 2>&1 & done; wait
  timeout 200 python tests/run_gpu_suite.py --parts gradients --out build/gpu-suite > $OUT/suite-c.log 2>&1
  echo "gradients: $(tail -n 1 build/gpu-suite/gradients.log) ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/c.log
  for round in 1 2; do  # (each line into $OUT/c.log as it comes: a call cut short keeps what it had)
    python lab/experiments/run178-merge.py new-$round | tee -a $OUT/c.log
    (cd .old && FUSEDLIB_CACHE=$PWD/build/flcache PYTHONPATH=$PWD python lab/experiments/run178-merge.py old-$round) | tee -a $OUT/c.log
  done
  exit
fi
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > $OUT/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > $OUT/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" $OUT/build-*.log && tail -30 $OUT/build-*.log
if [ "${PART:-a}" = b ]; then
  timeout 420 python tests/run_gpu_suite.py --parts forward-84b,forward-33b,gradients,training --out build/gpu-suite \
    > $OUT/suite.log 2>&1
  echo "suite parts: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 build/gpu-suite/*.log | grep -v "^$" | tail -12
  timeout 150 python -m pytest -q -m gpu tests/test_kernelbench.py -p no:cacheprovider > $OUT/kernelbench.log 2>&1
  echo "kernelbench: $(tail -n 1 $OUT/kernelbench.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|XPASS" $OUT/kernelbench.log | head
  exit
fi
timeout 240 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider -k "not compiled" > $OUT/mixed.log 2>&1
echo "mixed precision: $(tail -n 1 $OUT/mixed.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|^ERROR" $OUT/mixed.log | head -12
timeout 150 python -m pytest -q -m gpu tests/test_gpu_operator.py -p no:cacheprovider > $OUT/operator.log 2>&1
echo "operator: $(tail -n 1 $OUT/operator.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/operator.log | head -5
timeout 90 python lab/experiments/run178-time.py 2>&1 | tee $OUT/time.log
timeout 150 python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider -k "compiled" > $OUT/compiled.log 2>&1
echo "compiled: $(tail -n 1 $OUT/compiled.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|Error" $OUT/compiled.log | head -5
echo "done ($(( $(date +%s) - t0 )) s)"
