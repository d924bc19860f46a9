#!/usr/bin/env bash
# Key-split warpgroups in the batch-invariant mode, chosen by each sequence's own query rows
# (docs/MODES.md, *Batch invariance*), on the H200.
#   check: reliability (every check, both generation-5 paths; the long loops shortened), verify
#          --batch-invariant on the Hopper path, sanitize (Hopper forward), and the prefill /
#          decode parity probe (parity.py) in the mode's plans and in the row-serial ones.
#   cost:  the ladder default / batch-invariant interleaved twice, the same with the key split
#          off (what parity costs there), a batch of short sequences; the varlen, paged and
#          decode suites default / batch-invariant, and decode through the persistent kernel.
# From the repo root, with stripped release binaries in .carry/ (xtask, flashcore):
#   bash docs/results/2026-11-29-key-split-bi-h200/run.sh check|cost|cost2|check2
# check and cost ran the first rule (query rows only); cost2 and check2 the rule with the key
# bound (at most 1024 keys), which the cost run asked for.
set -u
PHASE=${1:-check}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/$PHASE.txt; L=/tmp/logs-$PHASE; mkdir -p $L
D=docs/results/2026-11-29-key-split-bi-h200
pack() { (cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs-$PHASE); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $R
git log -1 --format='tree: %h %s' 2>/dev/null | tee -a $R
SECONDS=0
G5=persistent-hopper,persistent-portable
H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
cmp() { echo "== $1" | tee -a $R; python3 bench/compare_runs.py "$2" "$3" --label "$4" | tee -a $R; }
case $PHASE in
check)
  job reliability 540 $X reliability --kernels $G5 --no-huge --soak-cases 1500 --persistent-runs 200 --backward-runs 200 --json $L/rel.json
  job verify-bi-hopper 400 $X verify --batch-invariant --kernels $H --cases 1000 --seed 2921
  job sanitize 400 $X sanitize --pass fwd --kernels $H --logs $L/san
  wait
  echo "== parity probe: the mode's plans" | tee -a $R
  timeout 120 python3 $D/parity.py .carry/flashcore /tmp/parity-default 2>&1 | tee -a $R
  echo "== parity probe: FLASHCORE_DECODE=off FLASHCORE_HOPPER_WG_KEY_SPLIT=0 (row-serial everywhere)" | tee -a $R
  FLASHCORE_DECODE=off FLASHCORE_HOPPER_WG_KEY_SPLIT=0 timeout 120 python3 $D/parity.py .carry/flashcore /tmp/parity-serial 2>&1 | tee -a $R
  sort $L/rc.txt | tee -a $R
  for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | cut -c1-600 | tee -a $R; done
  grep -E "^\| [a-z]+ \| " $L/reliability.log | cut -c1-260 | tee -a $R
  grep -E "FAIL|reliability:|panicked" $L/reliability.log | cut -c1-600 | head -12 | tee -a $R
  grep -E "^\| batchinv " $L/reliability.log | tr ';' '\n' | cut -c1-200 | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
cost)
  bench() { # label timeout args...
    local label=$1 t=$2; shift 2
    timeout $t $X bench-all --kernels $H --no-peers --no-gemm --out-dir $L/$label "$@" > $L/$label.log 2>&1
    echo "$label rc=$? (${SECONDS}s)" | tee -a $R
  }
  for i in 1 2; do
    bench ladder-def$i 120 --suite ladder
    bench ladder-bi$i 120 --suite ladder --batch-invariant
  done
  FLASHCORE_HOPPER_WG_KEY_SPLIT=0 bench ladder-bi-serial 120 --suite ladder --batch-invariant
  for mode in def bi; do
    flag=""; [ $mode = bi ] && flag=--batch-invariant
    bench short-$mode 120 --shape 64,8,512,64 --shape 16,32,128,128 --causal both $flag
  done
  for s in varlen paged decode; do
    bench $s-def 120 --suite $s
    bench $s-bi 120 --suite $s --batch-invariant
  done
  FLASHCORE_DECODE=off bench decode-bi-serial 150 --suite decode --batch-invariant
  cmp "ladder #1: batch-invariant / default" $L/ladder-def1/bench-all.json $L/ladder-bi1/bench-all.json bi
  cmp "ladder #2: batch-invariant / default" $L/ladder-def2/bench-all.json $L/ladder-bi2/bench-all.json bi
  cmp "ladder: batch-invariant without the key split / default #2" $L/ladder-def2/bench-all.json $L/ladder-bi-serial/bench-all.json serial
  cmp "short sequences in large batches: batch-invariant / default" $L/short-def/bench-all.json $L/short-bi/bench-all.json bi
  for s in varlen paged decode; do
    cmp "$s: batch-invariant / default" $L/$s-def/bench-$s.json $L/$s-bi/bench-$s.json bi
  done
  cmp "decode: batch-invariant through the persistent kernel / batch-invariant decode kernel" $L/decode-bi/bench-decode.json $L/decode-bi-serial/bench-decode.json serial
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
cost2)
  bench() { # label timeout args...
    local label=$1 t=$2; shift 2
    timeout $t $X bench-all --kernels $H --no-peers --no-gemm --out-dir $L/$label "$@" > $L/$label.log 2>&1
    echo "$label rc=$? (${SECONDS}s)" | tee -a $R
  }
  for i in 1 2; do
    bench ladder-def$i 120 --suite ladder
    bench ladder-bi$i 120 --suite ladder --batch-invariant
  done
  for mode in def bi; do
    flag=""; [ $mode = bi ] && flag=--batch-invariant
    bench short-$mode 120 --shape 64,8,512,64 --shape 16,32,128,128 --causal both $flag
  done
  for s in varlen paged decode; do
    bench $s-def 120 --suite $s
    bench $s-bi 120 --suite $s --batch-invariant
  done
  FLASHCORE_HOPPER_WG_KEY_SPLIT=0 bench varlen-bi-unrouted 120 --suite varlen --batch-invariant
  for i in 1 2; do
    cmp "ladder #$i: batch-invariant / default" $L/ladder-def$i/bench-all.json $L/ladder-bi$i/bench-all.json bi
  done
  cmp "short sequences in large batches: batch-invariant / default" $L/short-def/bench-all.json $L/short-bi/bench-all.json bi
  for s in varlen paged decode; do
    cmp "$s: batch-invariant / default" $L/$s-def/bench-$s.json $L/$s-bi/bench-$s.json bi
  done
  cmp "varlen: batch-invariant with the key-split route / without it (FLASHCORE_HOPPER_WG_KEY_SPLIT=0)" $L/varlen-bi-unrouted/bench-varlen.json $L/varlen-bi/bench-varlen.json routed
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
check2)
  job reliability 230 $X reliability --kernels $G5 --no-huge --soak-cases 300 --persistent-runs 100 --backward-runs 100 --json $L/rel.json
  job verify-bi-hopper 200 $X verify --batch-invariant --kernels $H --cases 300 --seed 2931
  job sanitize 400 $X sanitize --pass fwd --kernels $H --logs $L/san
  wait
  echo "== parity probe: the mode's plans" | tee -a $R
  timeout 120 python3 $D/parity.py .carry/flashcore /tmp/parity-default 2>&1 | tee -a $R
  sort $L/rc.txt | tee -a $R
  for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | cut -c1-600 | tee -a $R; done
  grep -E "^\| [a-z]+ \| " $L/reliability.log | cut -c1-260 | tee -a $R
  grep -E "FAIL|reliability:|panicked" $L/reliability.log | cut -c1-600 | head -12 | tee -a $R
  grep -E "^\| batchinv " $L/reliability.log | tr ';' '\n' | cut -c1-200 | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
esac
