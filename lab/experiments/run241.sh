#!/usr/bin/env bash
# run241 (one H200 or H100; issue 36), branch next: the backward's partials kernel with the merge of
# each column block's tiles by the whole block of its last tile (chunks of 8 tiles brought into
# shared memory by 256 threads, the next chunk's loads in flight while one warp a column merges),
# 16-bit operands held as loaded, and 33/39's affine row pass by rows for a 16-bit Z' (run239's,
# now the package's). To beat (run237, branch bwdpairs, H200): the partials kernel at 39 270.6 µs
# in bf16 (DRAM floor 64.2), 271.9 in tf32 (128.5); at 84 33.0 / 38.9, at 33 27.0 / 36.3 (bf16 /
# tf32); the affine pass at 39 in bf16 64.7 µs (run239, R = 2). Builds every extension (the cache
# back as flcache.part-*), then: the backward's 16-bit tests (bits against float32, aligned and
# off the pairs); the train step's kernels at 84, 33, 39 in tf32, bf16 and fp16 (run233-bwd.py);
# the bf16 train steps (fused, eager); the GPU suite's gradients at 84 and 33 (the float32
# kernels changed; 39's and the large part's next time); the 16-bit forward tests of 33 (the affine
# pass; as long as time allows). Returns run241.log, run241-out.tgz, flcache.part-*. Give it 560 s.
NAME=run241; LOG=$NAME.log
. lab/experiments/preamble.sh  # set -u, the paths, t0, say, the build cache
. lab/experiments/build_all.sh
O=/tmp/$NAME; mkdir -p $O
timeout 120 python -m pytest -m gpu -q tests/test_mixed_precision.py -k "backward" > $O/tests-bwd16.out 2>&1
say "backward 16-bit tests: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/tests-bwd16.out | tail -n 8 | tee -a $OUT/$LOG
OUT=$O NAME=$NAME PROBLEMS=84,33,39 PRECISIONS=tf32,bf16,fp16 timeout 120 python lab/experiments/run233-bwd.py > $O/bwd.out 2>&1
say "the train step's kernels: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -i "partials\|affine\|dz" $O/bwd.out | sed 's/(fl::BackwardProblem, int)//; s/void fl:://' | cut -c1-150 | tee -a $OUT/$LOG
timeout 120 python -m fusedlib train-step --problem 84,33,39 --precision bf16 --impl fused,eager \
  --out $O/train.csv --fresh > $O/train.out 2>&1
say "train steps: rc=$? ($(( $(date +%s) - t0 )) s)"; grep " step " $O/train.out | tee -a $OUT/$LOG
FUSEDLIB_GPU_PROBLEMS=84,33 timeout $(( 470 - ($(date +%s) - t0) )) python -m pytest -m gpu -q tests/test_gpu.py \
  -k "gradients or bit_identical or non_finite" > $O/tests-grad.out 2>&1
say "gradients 84, 33: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/tests-grad.out | tail -n 8 | tee -a $OUT/$LOG
left=$(( 545 - ($(date +%s) - t0) ))
if [ $left -gt 20 ]; then
  timeout $left python -m pytest -m gpu -q -x tests/test_mixed_precision.py \
    -k "33 and (low_precision_within or sixteen_bit_kernels_on_each_path or last_pass or autocast_computes)" > $O/tests-fwd16.out 2>&1
  say "16-bit forward of 33 (${left} s at most): rc=$? ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED\|passed\|failed" $O/tests-fwd16.out | tail -n 8 | tee -a $OUT/$LOG
  say "progress (. passed, F failed): $(grep -E '^[.FsxE]+' $O/tests-fwd16.out | tr -cd '.F' | fold -w1 | sort | uniq -c | tr '\n' ' ')"
fi
tar czf $OUT/$NAME-out.tgz -C /tmp $NAME
