#!/usr/bin/env bash
# run185 (one H200 or H100; results/h200/NOTES.md, "Next, in device calls"). Every part streams
# its log to $OUT as it runs (a call past its limit still returns what it wrote).
#   PART=check  on a tree with the prepared patches applied in order (not committed):
#               run181-sixteen-bit-operator, run183-sixteen-bit-backward, run184-sixteen-bit-y,
#               run185-sixteen-bit-backward-call and run186-sixteen-bit-train-node (without the
#               last if its build fails): build, the build cache back in parts
#               (flcache.part-*: copy them into .cache/ for the calls after), the mixed, KernelBench
#               and operator GPU tests (the 16-bit backward's one C++ call and the train
#               forward's C++ autograd node among what they run),
#               run180-step16.py (the bf16 train step: kernels and host a step, against run183's
#               864 µs of kernels and 1350 µs of host at 84), run184-host.py (where the host
#               time goes now) and the 16-bit train steps of 84 and 33 as `train-step` records them
#               (fused and eager; issue 36's ≤ 0.85 × eager bf16)
#   PART=c      on the tree as committed (its build cache carried as .cache): run184-epilogue-order.py,
#               the persistent GEMM's deferred count with one release fence after the CTA's
#               barrier against every thread's fence, in the fused and sums (control) stages, bf16,
#               tf32 and 3xtf32, bit for bit the same outputs
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
. lab/experiments/restore_cache.sh
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s" | tee $OUT/run185.log
grep -il "error" /tmp/build-*.log && tail -30 /tmp/build-*.log | tee -a $OUT/run185.log
case ${PART:-check} in
  check) ls .cache/flcache.part-* > /dev/null 2>&1 || tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
     # the new C++ routes' tests first, each alone, so that a crash names its test (a first try of
     # run186's node crashed the process in autograd's worker thread: its backward returned 9
     # gradients where torch::autograd::Function wants one for each of forward's 14 arguments,
     # since fixed); where the machine has gdb, under it, for the C++ stack of a crash
     gdb=""; command -v gdb > /dev/null && gdb="gdb -q -batch -ex run -ex bt --args"
     for k in backward_call_is_its_parts cpp_node autocast_takes_the_eager_call; do
       timeout 150 $gdb python -X faulthandler -m pytest -q -m gpu tests/test_mixed_precision.py -k $k -x \
         -p no:cacheprovider >> $OUT/first.log 2>&1
       echo "$k: $(grep -h "passed\|failed\|error\|SIGSEGV" $OUT/first.log | tail -n 1) ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/run185.log
     done
     timeout 300 python -m pytest -q -m gpu tests/test_mixed_precision.py tests/test_kernelbench_eval.py \
       tests/test_gpu_operator.py -p no:cacheprovider > $OUT/checks.log 2>&1
     echo "mixed + kernelbench + operator: $(tail -n 1 $OUT/checks.log) ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/run185.log
     grep -h "^FAILED\|^E  " $OUT/checks.log | head -12
     python lab/experiments/run180-step16.py 2>&1 | grep -v Warning >> $OUT/run185.log
     echo "step: $(( $(date +%s) - t0 )) s" | tee -a $OUT/run185.log
     python lab/experiments/run184-host.py > /dev/null 2>&1; echo "host profile: $(( $(date +%s) - t0 )) s" | tee -a $OUT/run185.log
     # issue 36's train step as the records measure it (fused and eager, bf16 and fp16, 84 and 33)
     mkdir -p /tmp/ts; python -m fusedlib train-step --problem 84,33 --precision 16bit --impl fused,eager --fresh \
       --out /tmp/ts/train_step.csv >> $OUT/run185.log 2>&1; cp /tmp/ts/train_step.csv $OUT/
     echo "train step: $(( $(date +%s) - t0 )) s" | tee -a $OUT/run185.log
     grep "kernels .* a step" $OUT/run185.log ;;
  c) rm -rf build/run184-kernels
     python -c "import importlib.util as u, pathlib; s = u.spec_from_file_location('e', 'lab/experiments/run184-epilogue-order.py'); m = u.module_from_spec(s); s.loader.exec_module(m); m.edited_kernels(pathlib.Path('build/run184-kernels'))"
     for s in sums fused; do python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('$s', 0, Path('build/run184-kernels'))" > $OUT/build-e-$s.log 2>&1 & done
     wait; echo "edited built: $(( $(date +%s) - t0 )) s" | tee -a $OUT/run185.log
     grep -il "error" $OUT/build-e-*.log && tail -20 $OUT/build-e-*.log
     python lab/experiments/run184-epilogue-order.py 2>&1 | grep -v Warning >> $OUT/run185.log
     tail -n 16 $OUT/run185.log ;;
esac
