#!/usr/bin/env bash
# Call 1: the backward's grid for the modes whose units differ (issue 39's window and varlen rows).
# - bench-all --pass bwd --suite bwd-modes, window and varlen rows, three ways: the plan's grid,
#   FLASHCORE_HOPPER_BWD_PERSISTENT=1 (one CTA per SM striding over the units) and =0 (one CTA
#   per unit);
# - the dense ladder's causal rows with FLASHCORE_HOPPER_BWD_PERSISTENT=1 beside the default;
# - the unit timeline (FLASHCORE_HOPPER_BWD_TRACE=1) of the D = 128, W = 1024 window row, both grids.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-grid-h200/call1.sh
# Outputs in $OUT/call1: summary.txt, modes-{plan,sms,units}.md (+ json), causal-{plan,sms}.md,
# trace-{plan,sms}.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call1; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
C="--case window --case varlen"
for v in plan sms units; do
  case $v in plan) E=;; sms) E=FLASHCORE_HOPPER_BWD_PERSISTENT=1;; units) E=FLASHCORE_HOPPER_BWD_PERSISTENT=0;; esac
  env $E timeout 150 $X bench-all --pass bwd --suite bwd-modes --kernels $H $C --repeats 9 --out-dir $L/modes-$v > $L/modes-$v.log 2>&1
  echo "bwd-modes $v ($E) rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/modes-$v/bench-bwd-modes.md $O/modes-$v.md 2>/dev/null; cp $L/modes-$v/bench-bwd-modes.json $O/modes-$v.json 2>/dev/null
done
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64"
for v in plan sms; do
  case $v in plan) E=;; sms) E=FLASHCORE_HOPPER_BWD_PERSISTENT=1;; esac
  env $E timeout 90 $X bench-all --pass bwd --kernels $H $S --causal on --no-peers --out-dir $L/causal-$v > $L/causal-$v.log 2>&1
  echo "dense causal $v rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/causal-$v/bench-bwd.md $O/causal-$v.md 2>/dev/null
done
for v in plan sms; do
  case $v in plan) E=;; sms) E=FLASHCORE_HOPPER_BWD_PERSISTENT=1;; esac
  env $E FLASHCORE_HOPPER_BWD_TRACE=1 timeout 60 $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "d128 b1 s16384 win1024" --repeats 1 --out-dir $L/trace-$v > $L/trace-$v.log 2>&1
  echo "trace $v rc=$? (${SECONDS}s)" | tee -a $R
  grep "bwd-trace" $L/trace-$v.log | head -40 > $O/trace-$v.txt
done
(cd /tmp && tar cJf $O/logs.tar.xz logs-call1)
for v in plan sms units; do echo "== modes $v"; grep -E "^\| (window|varlen)" $O/modes-$v.md 2>/dev/null | cut -d'|' -f3,6-8; done | tee -a $R
for v in plan sms; do echo "== causal $v"; grep -E "^\| [0-9]" $O/causal-$v.md 2>/dev/null | cut -d'|' -f2-6; done | tee -a $R
for v in plan sms; do echo "== trace $v"; head -8 $O/trace-$v.txt; done | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
