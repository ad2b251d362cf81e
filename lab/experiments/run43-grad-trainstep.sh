#!/usr/bin/env bash
# run43: 3xTF32 gradients again after the backward's GEMMs add slice by slice (ops.three_tf32;
# run42: 1.7-5x over budget at the KernelBench shapes), merged into validation.json; then the
# train steps (python -m fusedlib train-step --fresh). run44: the train steps again (SKIP_GRAD=1).
set -u
export PYTHONPATH=$PWD FUSEDLIB_CACHE=$PWD/build/flcache PYTHONUNBUFFERED=1
t0=$(date +%s)
for s in naive fold sums fused; do python -c "from fusedlib.build import load_stage; load_stage('$s')" & done
python -c "from fusedlib.build import load_backward; load_backward()" &
wait
echo "built in $(( $(date +%s) - t0 )) s"
[ -z "${SKIP_GRAD:-}" ] && FUSEDLIB_VALIDATION_APPEND=1 python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider \
  -k "gradients and 3xtf32" > $OUT/grad3x.log 2>&1
echo "grad 3xtf32: rc=$? $(tail -1 $OUT/grad3x.log) ($(( $(date +%s) - t0 )) s)"
python - <<'PY'
import json
d = json.load(open("results/h100/validation.json"))
print(len(d["cases"]), "cases,", len(d["gradients"]), "gradient cases,",
      sum(not c["passed"] for c in d["gradients"]), "gradient failures")
for c in d["gradients"]:
    if c["precision"] == "3xtf32" and c["shape"] in ("1024x8192->8192", "16384x4096->4096"):
        print(c["problem"], c["shape"], c["passed"], round(c["worst_ratio"], 2),
              {k: f"{v:.1e}/{c['ref_grad_errs'][k]:.1e}" for k, v in c["grad_errs"].items()})
PY
cp results/h100/validation.json $OUT/
python -m fusedlib train-step --fresh > $OUT/train_step.log 2>&1
echo "train-step: rc=$? ($(( $(date +%s) - t0 )) s)"
grep -v Warning $OUT/train_step.log | grep -v "warnings.warn" | tail -60
cp results/h100/train_step.csv results/h100/train_step.sources.json $OUT/
tar czf $OUT/flcache.tgz build/flcache && ls -la $OUT/flcache.tgz
