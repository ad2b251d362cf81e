#!/usr/bin/env bash
# run114 (H100): racecheck of the unit hand-off's variants (run114-race.py), built side by side.
set -u
export PYTHONUNBUFFERED=1
L=$PWD/results/h100/logs
V="base oneread atomic"
t0=$(date +%s)
for v in $V; do python $L/run114-race.py setup $v > $OUT/build-$v.log 2>&1 & done
wait
echo "built in $(( $(date +%s) - t0 )) s"; grep -il error $OUT/build-*.log && tail -20 $OUT/build-*.log
for v in $V; do
  (cd /tmp && PYTHONPATH=/tmp/var-$v FUSEDLIB_CACHE=/tmp/var-$v/cache timeout 400 compute-sanitizer --tool racecheck \
     python $L/run114-race.py check > $OUT/race-$v.log 2>&1) &
done
wait
for v in $V; do echo "== $v: $(grep -c 'Error: Race' $OUT/race-$v.log) reports; $(grep 'RACECHECK SUMMARY\|check done' $OUT/race-$v.log | tr '\n' ' ')"; done
grep -h "Race reported\|and .* access" $OUT/race-*.log | cut -c1-200 | sort | uniq -c | head -20
echo "done ($(( $(date +%s) - t0 )) s)"
