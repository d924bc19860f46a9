#!/usr/bin/env bash
# The wide builds with modes (windows, softcap, ALiBi, varlen at 136-256), first GPU run, on
# nvidia-h200, in one call:
# - a smoke verify at 256 and 192 with bounded mbarrier waits (FLASHCORE_HOPPER_DEBUG=1);
# - verify --pass bwd of persistent-hopper at head dims 136-256, 500 random cases (modes drawn:
#   about two thirds of them) + edges; beside it (niced) sanitize --pass bwd at 192 and 256, whose
#   sweep has varlen and mode lines;
# - reliability --only backward on persistent-hopper at its default head dims and at 192 and 256.
# From the repo root with a stripped release xtask of the tree in .carry/xtask. Outputs in $OUT:
# call4.txt, logs-call4.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call4.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
SECONDS=0
H=persistent-hopper
for d in 256 192; do
  env FLASHCORE_HOPPER_DEBUG=1 timeout 120 $X verify --pass bwd --kernels $H --head-dims $d --cases 30 --no-edge --seed 5401 > $L/smoke-$d.log 2>&1
  echo "smoke-$d rc=$? (${SECONDS}s): $(grep -E 'passed, .* failed' $L/smoke-$d.log | tail -1)" | tee -a $R
done
grep -hE "FAIL|panicked|trap|error" $L/smoke-*.log | cut -c1-400 | head -6 | tee -a $R
if grep -qE "FAIL|panicked|trap" $L/smoke-*.log; then (cd /tmp && tar cJf $OUT/logs-call4.tar.xz logs-call4); exit 1; fi
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (env FLASHCORE_CACHE_DIR=/tmp/fc-$label timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify 240 $X verify --pass bwd --kernels $H --head-dims 136,160,184,192,200,224,248,256 --cases 500 --seed 5402
job sanitize 240 nice -n 19 $X sanitize --pass bwd --kernels $H --head-dims 192,256 --logs $L/san
wait
sort $L/rc.txt | tee -a $R
echo "verify: $(grep -E 'passed, .* failed' $L/verify.log | tail -1)" | tee -a $R
grep -hE "FAIL|panicked" $L/verify.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
for dims in "" "--head-dims 192,256"; do
  timeout 150 $X reliability --kernels $H --only backward --no-huge --backward-runs 200 $dims > $L/rel.log 2>&1
  echo "== reliability --only backward $dims rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| backward \| " $L/rel.log | cut -c1-160 | tee -a $R; grep -E "^reliability: [0-9]" $L/rel.log | tee -a $R
  cat $L/rel.log >> $L/reliability-all.log
done
(cd /tmp && tar cJf $OUT/logs-call4.tar.xz logs-call4)
