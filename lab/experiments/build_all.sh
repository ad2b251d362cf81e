# Sourced by the run scripts after preamble.sh, in the repository root on the device: every stage and
# the backward built side by side (start_builds.sh) and waited for, the build time and any build error
# in $OUT/$LOG (say), and the build cache back in parts under 8 MB ($OUT/flcache.part-*: copy them into
# .cache/ and carry .cache, for restore_cache.sh on the next call).
. lab/experiments/start_builds.sh
wait
say "built in $(( $(date +%s) - t0 )) s"
grep -il "error" /tmp/build-*.log && tail -40 /tmp/build-*.log | tee -a "$say_log"
tar czf - build/flcache | split -b 7M - $OUT/flcache.part-
