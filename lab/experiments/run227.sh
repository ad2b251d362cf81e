#!/usr/bin/env bash
# run227 (one H200 or H100; issue 36): the GPU check of the module's own cast of x under compile and
# autocast (tests/test_mixed_precision.py -k compiled, the inductor caches on: modules._run), beside
# the build of run227-overlap.py's copy of the kernels; then run227-overlap.py (39's bf16 fused GEMM
# taken apart: Z′ in bf16, not stored, the raster by column groups, a side stream under the
# mainloop). Returns run227.log, run227-compiled.log and run227-*.csv. About 5 minutes.
LOG=run227.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
python lab/experiments/run227-overlap.py copy
python -c "from pathlib import Path; from fusedlib.build import load_stage; load_stage('fused', 0, Path('build/run227-overlap'))" \
  > /tmp/build-copy.log 2>&1 &
[ -z "${SKIP_COMPILED:-}" ] && timeout 240 python -m pytest -q -m gpu tests/test_mixed_precision.py -k compiled -p no:cacheprovider \
  > $OUT/run227-compiled.log 2>&1
say "compiled tests: $(tail -n 1 $OUT/run227-compiled.log) ($(( $(date +%s) - t0 )) s)"
grep -h "^E  \|^FAILED" $OUT/run227-compiled.log | head -20 | tee -a $OUT/$LOG
wait
say "copy built ($(( $(date +%s) - t0 )) s)"; grep -i "error" /tmp/build-copy.log | head -20 | tee -a $OUT/$LOG
timeout 330 python lab/experiments/run227-overlap.py > $OUT/run227-overlap.out 2>&1
say "run227-overlap: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 45 $OUT/run227-overlap.out | tee -a $OUT/$LOG
