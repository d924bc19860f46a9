#!/usr/bin/env bash
# Call 2: where a causal varlen backward's time goes, kernel by kernel. Call 1's traced steps of
# the causal varlen builds cost 1.24-1.5x their dense twins' (same step counts), but the trace
# serializes the launch; here ncu times every launch of the three backward kernels (prepare,
# dk_dv, dq_convert) of each row's mode and twin, untraced; then the rows with the short-row
# delta of the first launch off (FLASHCORE_BWD_SHORT_ROW_KEYS=0) beside the plan's.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-schedule-h200/call2.sh
# Outputs in $OUT/call2: summary.txt, ncu-*.csv, short-rows.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call2; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
prof() { # label case
  timeout 150 ncu --clock-control none -k regex:bwd_hopper --launch-count 240 --csv --metrics gpu__time_duration.sum \
    $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "$2" --repeats 1 --sample-ms 1 \
    --out-dir $L/$1 > $L/ncu-$1.log 2>&1
  echo "ncu $1 rc=$? (${SECONDS}s)" | tee -a $R
  grep -E '^"[0-9]+"' $L/ncu-$1.log > $O/ncu-$1.csv
}
prof d64-equal-causal "d64 varlen 8x2048 causal"
prof d128-equal-causal "d128 varlen 8x2048 causal"
prof d64-mixed-causal "d64 varlen 8 mixed causal"
prof d128-mixed-causal "d128 varlen 8 mixed causal"
echo "| short rows | problem | dense twin | mode µs | twin µs | ratio |" > $O/short-rows.md
echo "|---|---|---|---:|---:|---:|" >> $O/short-rows.md
for v in plan 0 plan 0; do
  e=""; [ $v = 0 ] && e=FLASHCORE_BWD_SHORT_ROW_KEYS=0
  env $e timeout $((560 - SECONDS)) $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "varlen 8x2048" \
    --case "mixed causal" --repeats 5 --out-dir $L/short-$v > $L/short-$v.log 2>&1
  echo "short rows $v rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| varlen" $L/short-$v/bench-bwd-modes.md | cut -d'|' -f3,4,6-8 | sed "s/^/| $v |/" >> $O/short-rows.md
done
(cd /tmp && tar cJf $O/logs.tar.xz logs-call2)
cat $O/short-rows.md | tee -a $R
for f in $O/ncu-*.csv; do echo "== $f $(wc -l < $f) launches"; done | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
