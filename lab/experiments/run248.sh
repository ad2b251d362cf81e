#!/usr/bin/env bash
# run248 (one H200 or H100; issue 36; branch eval16): eval mode's 16-bit Y of 33/39 written by the
# GEMM's AffineStore epilogue (no float32 Y, no narrowing pass): sums and fused built, the GPU tests
# of its bits (each GEMM path, the last writer's tests in eval mode), then 39's and 33's eval forward
# in bf16 (fused and sums, with cuBLAS's GEMM alone beside them; µs, CUDA events, L2 flushed; the
# package's timing protocol). Every step stops by LIMIT seconds after the start (default 200).
LOG=run248.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
L=${LIMIT:-200}
left() { echo $(( L - ($(date +%s) - t0) )); }
for s in sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
wait
say "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && grep -h -A8 "error" /tmp/build-*.log | head -30 | tee -a $OUT/$LOG
timeout $(left) python -m pytest -q -m gpu tests/test_mixed_precision.py -p no:cacheprovider \
  -k "eval_epilogue_writes or (last_pass_writes and eval and (sums or fused))" > $OUT/run248-tests.log 2>&1
say "tests: rc=$? $(tail -n 1 $OUT/run248-tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^E  \|^FAILED" $OUT/run248-tests.log | head -20 | tee -a $OUT/$LOG
timeout $(left) python lab/experiments/run248-eval.py 2>&1 | grep -v Warning | tee -a $OUT/$LOG
say "done ($(( $(date +%s) - t0 )) s)"
