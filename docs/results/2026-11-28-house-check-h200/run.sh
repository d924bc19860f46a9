#!/usr/bin/env bash
# The tree after the house's restructuring (issue 36) and the Hopper consumer's exact rescale of
# an unchanged row max (docs/MODES.md, *Batch invariance*), on the H200.
#   check: verify (every kernel, both passes; the batch-invariant mode on both generation-5
#          paths), sanitize (Hopper forward), reliability (every check, the long loops shortened)
#          on both generation-5 paths.
#   cost:  the ladder, varlen and paged suites: this tree's default against the tree before the
#          consumer change (.carry/xtask-base), interleaved, then this tree's batch-invariant mode.
# From the repo root, with stripped release xtasks in .carry/xtask (this tree) and
# .carry/xtask-base (its parent commit before the consumer change):
#   bash docs/results/2026-11-28-house-check-h200/run.sh check|cost
set -u
PHASE=${1:-check}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; B=.carry/xtask-base; R=$OUT/$PHASE.txt; L=/tmp/logs-$PHASE; mkdir -p $L
pack() { (cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs-$PHASE); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $R
git log -1 --format='tree: %h %s' 2>/dev/null | tee -a $R
SECONDS=0
G5=persistent-hopper,persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
cmp() { echo "== $1" | tee -a $R; python3 bench/compare_runs.py "$2" "$3" --label "$4" | tee -a $R; }
case $PHASE in
check)
  job reliability 540 $X reliability --kernels $G5 --no-huge --soak-cases 1500 --persistent-runs 200 --backward-runs 200 --json $L/rel.json
  job verify-fwd 400 $X verify --cases 300 --seed 2901
  job verify-bwd 400 $X verify --pass bwd --cases 200 --seed 2902
  job verify-bi-hopper 400 $X verify --batch-invariant --kernels persistent-hopper --cases 500 --seed 2903
  job verify-bi-portable 400 $X verify --batch-invariant --kernels persistent-portable --cases 500 --seed 2904
  job sanitize 400 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san
  wait
  sort $L/rc.txt | tee -a $R
  for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -8 | tr '\n' ' ')" | cut -c1-900 | tee -a $R; done
  grep -E "^\| [a-z]+ \| " $L/reliability.log | cut -c1-220 | tee -a $R
  grep -E "FAIL|reliability:|panicked" $L/reliability.log | cut -c1-600 | head -12 | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
cost)
  for i in 1 2; do
    for t in base new; do
      x=$X; [ $t = base ] && x=$B
      timeout 90 $x bench-all --suite ladder --kernels persistent-hopper --no-peers --out-dir $L/ladder-$t$i > $L/ladder-$t$i.log 2>&1; echo "ladder $t #$i rc=$? (${SECONDS}s)" | tee -a $R
    done
  done
  timeout 90 $X bench-all --suite ladder --kernels persistent-hopper --no-peers --batch-invariant --out-dir $L/ladder-bi > $L/ladder-bi.log 2>&1; echo "ladder bi rc=$? (${SECONDS}s)" | tee -a $R
  for s in varlen paged; do
    for t in base new; do
      x=$X; [ $t = base ] && x=$B
      timeout 60 $x bench-all --suite $s --kernels persistent-hopper --no-peers --out-dir $L/$s-$t > $L/$s-$t.log 2>&1; echo "$s $t rc=$? (${SECONDS}s)" | tee -a $R
    done
    timeout 60 $X bench-all --suite $s --kernels persistent-hopper --no-peers --batch-invariant --out-dir $L/$s-bi > $L/$s-bi.log 2>&1; echo "$s bi rc=$? (${SECONDS}s)" | tee -a $R
  done
  cmp "ladder #1: this tree / base" $L/ladder-base1/bench-all.json $L/ladder-new1/bench-all.json new
  cmp "ladder #2: this tree / base" $L/ladder-base2/bench-all.json $L/ladder-new2/bench-all.json new
  cmp "ladder: batch-invariant / default (this tree, #2)" $L/ladder-new2/bench-all.json $L/ladder-bi/bench-all.json bi
  for s in varlen paged; do
    cmp "$s: this tree / base" $L/$s-base/bench-$s.json $L/$s-new/bench-$s.json new
    cmp "$s: batch-invariant / default (this tree)" $L/$s-new/bench-$s.json $L/$s-bi/bench-$s.json bi
  done
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
esac
