#!/usr/bin/env bash
# Call 1: the whole schedule of the backward's launch on the varlen rows outside issue 39's bound
# (FLASHCORE_HOPPER_BWD_TRACE=2: every CTA's units with SM, steps, globaltimer start and end), the
# mode and its dense twin each, then the same rows untimed by the trace for reference.
# From the repo root, with .carry/xtask (release, stripped) and bench/bwd_schedule.py:
#   bash docs/results/2026-12-02-hopper-bwd-schedule-h200/call1.sh
# Outputs in $OUT/call1: summary.txt, schedule-*.txt, plain.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call1; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
trace() { # label case...
  local label=$1; shift
  local cases=(); for c in "$@"; do cases+=(--case "$c"); done
  FLASHCORE_HOPPER_BWD_TRACE=2 timeout $((400 - SECONDS)) $X bench-all --pass bwd --suite bwd-modes --kernels $H \
    "${cases[@]}" --repeats 1 --out-dir $L/$label > $L/$label.log 2>&1
  echo "traced $label rc=$? (${SECONDS}s)" | tee -a $R
  python3 bench/bwd_schedule.py $L/$label.log > $O/schedule-$label.txt
  grep -E "^\| varlen" $L/$label/bench-bwd-modes.md | cut -d'|' -f3,4,6-8 >> $O/schedule-$label.txt
}
# Each mixed label runs four launches: non-causal mode, its twin, causal mode, its twin.
trace d128-mixed "d128 varlen 8 mixed"
trace d64-mixed "d64 varlen 8 mixed"
trace d64-equal-causal "d64 varlen 8x2048 causal"
timeout $((560 - SECONDS)) $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "mixed causal" \
  --case "d64 varlen 8x2048 causal" --repeats 5 --out-dir $L/plain > $L/plain.log 2>&1
echo "plain rc=$? (${SECONDS}s)" | tee -a $R
cp $L/plain/bench-bwd-modes.md $O/plain.md 2>/dev/null
(cd /tmp && tar cJf $O/logs.tar.xz logs-call1)
for f in $O/schedule-*.txt; do echo "== $f"; cat $f; done | tee -a $R
grep -E "^\| varlen" $O/plain.md | cut -d'|' -f3,4,6-8 | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
