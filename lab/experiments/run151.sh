#!/usr/bin/env bash
# run151 (H100): 3xTF32's W parts by a pass over W where the row tiles are many (gemm_wgmma.cuh
# wg_w_pass) and the forward merge in runs of 64 tiles, then every GPU result on those kernels:
#   PART=ab        build (parallel; the build cache back in parts), the forced-way GPU cases
#                  (wgmma-wpass, wgmma-wsmem, the two ways bit for bit), 84's sums/fused fp32 train at
#                  33 600 000 x 4 -> 8 and two 3xtf32 cases at 65 537 x 64 -> 32 768
#   PART=abbench   bench of the fused 3xtf32 train forward with FUSEDLIB_WGMMA_WSPLIT=smem and =pass in turn (two
#                  rounds) for 84 and 33 at 1024x8192:8192, 16384x4096:4096 (39's) and 4096x4096:4096,
#                  and eager fp32 at each
#   PART=all       the whole GPU suite, the large part alone at its end (or PART=large, then PART=suite)
#   PART=large / suite / 84 / 33: as run150.sh; large also returns the build cache in parts
#                  (flcache.part-*: copy them into .cache/ and carry it, with large.json as
#                  .cache/gpu-suite/large.json, so that the later calls skip the build); suite runs
#                  every other part of the GPU suite (the course's exercises a part of their own)
#   PART=33        bench 33/39, then the size sweeps (with SWEEPS set empty, without them: then
#                  PART=sweeps in a later call, carrying results/h100/bench.csv and sources.json)
#   PART=train     train steps, then the peers once more into results/h100/peers/ (make results);
#                  with NOTEBOOKS=1 then the notebooks (or PART=notebooks after, carrying results/h100/peers)
#   SIXTEEN=1      (opt-in) with PART=84, 33 or train: the 16-bit rows of make results-16bit there too, appended
#                  after the part's own: bench --precision 16bit of the part's problems (84: about 3 min
#                  more, so PART=84 about 9.5 of a call's 10; 33,39: about 4 min, so with PART=33 give
#                  SWEEPS= as well), train-step --precision 16bit,autocast-bf16 (bench16.log, train_step16.log)
# Later parts start from the carried cache (.cache/flcache.part-*).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
ls .cache/flcache.part-* > /dev/null 2>&1 && cat .cache/flcache.part-* | tar xzf -  # the build cache, in parts under 8 MB
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" > /tmp/build-$s.log 2>&1 & done
python -c "from fusedlib.build import load_backward; load_backward()" > /tmp/build-bwd.log 2>&1 &
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il "error" /tmp/build-*.log && cat /tmp/build-*.log | tail -30
mkdir -p build/gpu-suite
sixteen() {  # the 16-bit tables of make results-16bit for problems $1, appended to bench.csv (SIXTEEN=1)
  python -m fusedlib bench --append --problem $1 --precision 16bit --impl stages,eager,compile,gemm_only \
    > $OUT/bench16.log 2>&1
  echo "bench $1 16bit: rc=$? ($(( $(date +%s) - t0 )) s)"
}
sweeps() {  # the size sweeps, appended to bench.csv (make results)
  python -m fusedlib bench --append --problem 84,33 --mode train --sweep batch --sweep features \
    --impl stages,eager,compile,gemm_only > $OUT/sweeps.log 2>&1
  echo "sweeps: rc=$? ($(( $(date +%s) - t0 )) s)"
}
case $PART in
  ab) tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
      timeout 420 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -x \
        -k "wpass or wsmem or w_split_ways" > $OUT/ab-tests.log 2>&1
      echo "forced-way tests: $(tail -n 1 $OUT/ab-tests.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/ab-tests.log | head -5
      FUSEDLIB_VALIDATION_OUT=$OUT/large-ab.json timeout 300 python -m pytest -q -m gpu tests/test_gpu_large.py -p no:cacheprovider \
        -k "84-sums-train-fp32-simt-33600000 or 84-fused-train-fp32-simt-33600000 or 84-fused-train-3xtf32-wgmma-65537 or 33-sums-train-3xtf32-wgmma-65537" \
        > $OUT/ab-large.log 2>&1
      echo "large: $(tail -n 1 $OUT/ab-large.log) ($(( $(date +%s) - t0 )) s)"; grep -h "^FAILED" $OUT/ab-large.log | head -5 ;;
  abbench)
      for round in 1 2; do
        for way in smem pass; do
          FUSEDLIB_WGMMA_WSPLIT=$way timeout 150 python -m fusedlib bench --problem 84,33 --shape 84 --shape 39 \
            --shape 4096x4096:4096 --mode train --precision 3xtf32 --impl fused --min-time-ms 300 --out /tmp/ab/$way-$round/bench.csv \
            > $OUT/ab-bench-$way-$round.log 2>&1
        done
      done
      timeout 150 python -m fusedlib bench --problem 84,33 --shape 84 --shape 39 --shape 4096x4096:4096 \
        --mode train --precision fp32 --impl eager --min-time-ms 300 --out /tmp/ab/eager/bench.csv > $OUT/ab-bench-eager.log 2>&1
      echo "bench ($(( $(date +%s) - t0 )) s)"
      python - <<'PY' | tee $OUT/run151-ab.log
import csv, glob, collections
rows = collections.defaultdict(dict)
eager = {}
for f in glob.glob("/tmp/ab/*/bench.csv"):
    tag = f.split("/")[3]
    for r in csv.DictReader(open(f)):
        key = (r["problem"], f'{r["batch"]}x{r["in_features"]}:{r["out_features"]}')
        if tag == "eager":
            eager[key] = float(r["median_ms"])
        else:
            rows[key + (r["impl"],)][tag] = float(r["median_ms"])
print("problem shape impl | smem-1 smem-2 pass-1 pass-2 (ms) | eager fp32 | best smem / eager, best pass / eager")
for k in sorted(rows):
    t = rows[k]; e = eager.get(k[:2], float("nan"))
    s = min(t.get("smem-1", 9e9), t.get("smem-2", 9e9)); p = min(t.get("pass-1", 9e9), t.get("pass-2", 9e9))
    print(*k, "|", *(f'{t.get(x, float("nan")):.3f}' for x in ("smem-1", "smem-2", "pass-1", "pass-2")), "|",
          f"{e:.3f}", "|", f"{s / e:.3f} {p / e:.3f}")
PY
      tar czf $OUT/ab.tgz -C /tmp ab ;;
  all) timeout 575 python tests/run_gpu_suite.py --out build/gpu-suite 2>&1 | tee $OUT/suite.log
       tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log; tail -n 15 build/gpu-suite/large.log > $OUT/large-tail.log
       (cd build && tar czf $OUT/suite-logs.tgz gpu-suite)
       cp results/h100/validation.json $OUT/ ;;
  large)  tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
         timeout 480 python tests/run_gpu_suite.py --parts large --out build/gpu-suite 2>&1 | tee $OUT/large.log
         cp build/gpu-suite/large.json $OUT/; tail -n 15 build/gpu-suite/large.log > $OUT/large-tail.log ;;
  suite) cp .cache/gpu-suite/large.json build/gpu-suite/
         timeout 540 python tests/run_gpu_suite.py --out build/gpu-suite \
           --skip large 2>&1 | tee $OUT/suite.log
         tail -n 3 build/gpu-suite/*.log > $OUT/suite-tails.log
         (cd build && tar czf $OUT/suite-logs.tgz gpu-suite)
         cp results/h100/validation.json $OUT/ ;;
  84) python -m fusedlib bench --fresh --ceilings --profile --problem 84 > $OUT/bench.log 2>&1
      echo "bench 84: rc=$? ($(( $(date +%s) - t0 )) s)"
      if [ -n "${SIXTEEN:-}" ]; then sixteen 84; fi ;;
  33) python -m fusedlib bench --profile --problem 33,39 > $OUT/bench.log 2>&1
      echo "bench 33,39: rc=$? ($(( $(date +%s) - t0 )) s)"
      if [ -n "${SIXTEEN:-}" ]; then sixteen 33,39; fi
      if [ -n "${SWEEPS-1}" ]; then sweeps; fi ;;
  sweeps) sweeps; cp results/h100/bench.csv results/h100/sources.json $OUT/ ;;
  train) python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
          echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 22 $OUT/train_step.log
          if [ -n "${SIXTEEN:-}" ]; then  # bf16, fp16 and autocast-bf16 rows, appended (make results-16bit)
            python -m fusedlib train-step --precision 16bit,autocast-bf16 > $OUT/train_step16.log 2>&1
            echo "train-step 16bit: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 20 $OUT/train_step16.log
          fi
          cp results/h100/train_step.csv results/h100/train_step.sources.json $OUT/
          if [ -n "${PEERS-1}" ]; then  # (PEERS= : the committed peers kept)
          rm -rf results/h100/peers  # the peers once more (make results), for their run-to-run spread
          for p in 84 33 39; do python -m fusedlib bench --problem $p --shape $p --mode train \
            --impl eager,compile,gemm_only --remeasure --out results/h100/peers/bench.csv >> $OUT/peers.log 2>&1; done
          echo "peers: rc=$? ($(( $(date +%s) - t0 )) s)"; mkdir -p $OUT/peers && cp results/h100/peers/* $OUT/peers/
          fi
          [ -n "${NOTEBOOKS:-}" ] || exit 0 ;&
  notebooks) pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3
          export PYTHONPATH=/tmp/site:$PYTHONPATH
          python -m ipykernel install --user --name python3 > /dev/null 2>&1
          python notebooks/run_all.py > $OUT/notebooks.log 2>&1
          echo "notebooks: rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 $OUT/notebooks.log
          tar czf $OUT/notebooks.tgz notebooks/*.ipynb ;;
esac
case $PART in
  84|33) grep -i "warning\|error\|ceilings\|wrote" $OUT/bench.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -15
         [ -f $OUT/bench16.log ] && grep -i "warning\|error\|wrote" $OUT/bench16.log | grep -v "UserWarning\|warnings.warn" | cut -c1-300 | tail -10
                cp results/h100/bench.csv results/h100/sources.json results/h100/env.json results/h100/profile.csv $OUT/ ;;
esac
