#!/usr/bin/env bash
# Call 5: unit-order knobs on the rows still outside issue 39's bound (1a65cc2):
# - the mixed varlen rows with FLASHCORE_HOPPER_BWD_SECTION_UNITS = 66 and 1048576 (half a wave;
#   every head in one section, so key-block major over all heads) beside the plan's run;
# - D = 64 causal varlen 8 × 2048 with FLASHCORE_HOPPER_BWD_QUERY_ROWS=64 beside the plan's 128.
# The knobs apply to the dense twins too, so the variants compare by the mode's µs.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-grid-h200/call5.sh
# Outputs in $OUT/call5: summary.txt, knobs.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call5; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call5; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
echo "| variant | problem | dense twin | kernel | mode µs | twin µs | ratio |" > $O/knobs.md
echo "|---|---|---|---|---:|---:|---:|" >> $O/knobs.md
run() { # label env case
  env $2 timeout $((170 - SECONDS)) $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "$3" --repeats 9 --out-dir $L/$1 > $L/$1.log 2>&1
  echo "bwd-modes $1 ($2) rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| varlen" $L/$1/bench-bwd-modes.md | sed "s/^| varlen/| $1/" >> $O/knobs.md
}
run plan-mixed "" mixed
run s66-mixed FLASHCORE_HOPPER_BWD_SECTION_UNITS=66 mixed
run sall-mixed FLASHCORE_HOPPER_BWD_SECTION_UNITS=1048576 mixed
run plan-d64c "" "d64 varlen 8x2048 causal"
run rows64-d64c FLASHCORE_HOPPER_BWD_QUERY_ROWS=64 "d64 varlen 8x2048 causal"
(cd /tmp && tar cJf $O/logs.tar.xz logs-call5)
cut -d'|' -f2,3,6-8 $O/knobs.md | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
