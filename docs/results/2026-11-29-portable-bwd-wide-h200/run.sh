#!/usr/bin/env bash
# The portable backward (both schedules: persistent-portable-atomic and the deterministic
# persistent-portable) at every head dim that is a multiple of 8 up to 256, on the H200, in one
# call: builds at 160, 192, 224 and 256 (64-key blocks) beside 32-128, the other dims padded up.
# - verify --pass bwd of both kernels, 300 random cases each (head dims drawn from 8..256) and
#   the edge list (8, 64, 128, 192, 256);
# - sanitize --pass bwd at 160, 192 and 256 (racecheck at 160);
# - reliability --only backward at 192 and 256 (nan-padding, determinism, grid);
# - then the backward at (4,16,2048,D), D = 160, 192, 256, fp16, causal and not, beside the peers.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-portable-bwd-wide-h200/run.sh
# Outputs in $OUT: wide.txt (the summary, a short table last), bench-bwd.md, logs-wide.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/wide.txt; L=/tmp/logs-wide; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-atomic 180 $X verify --pass bwd --kernels $A --cases 300 --seed 3401
job verify-det 180 $X verify --pass bwd --kernels $P --cases 300 --seed 3402
job sanitize 180 $X sanitize --pass bwd --kernels $A,$P --head-dims 160,192,256 --logs $L/san
job reliability 180 $X reliability --kernels $A,$P --head-dims 192,256 --only backward --no-huge
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| backward \| " $L/reliability.log | cut -c1-220 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability.log $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
SH=""; for d in 160 192 256; do SH="$SH --shape 4,16,2048,$d"; done
timeout $((295 - SECONDS)) $X bench-all --pass bwd $SH --kernels $A,$P --no-fa3 --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $OUT/bench-bwd.md 2>/dev/null
grep -E "^\| 4,16" $L/bench/bench-bwd.md | head -40 >> $R
(cd /tmp && tar cJf $OUT/logs-wide.tar.xz logs-wide)
# The short table: each check's result, then each timed row (ours and the best peer).
{
  echo; echo "| what | result |"; echo "|---|---|"
  for k in $A $P; do
    echo "| verify --pass bwd $k | $(grep -hE "^ *$k \(bwd\): " $L/verify-*.log | tail -1 | sed -E 's/^ *[^:]*: //') |"
  done
  echo "| sanitize --pass bwd (160, 192, 256) | $(grep -hE '^sanitize: (no errors|.*error)' $L/sanitize.log | tail -1) |"
  echo "| reliability --only backward (192, 256) | $(grep -hE '^reliability: [0-9]+ passed' $L/reliability.log | tail -1) |"
  echo; echo "| D | causal | atomic µs | deterministic µs | best peer | peer µs | faster of ours vs best peer |"; echo "|---:|---|---:|---:|---|---:|---:|"
  for d in 160 192 256; do for c in no yes; do
    us() { grep -E "^\| 4,16,2048,$d \| f16 \| $c \| $1 \|" $L/bench/bench-bwd.md | head -1 | awk -F'|' '{gsub(/ /,"",$6); print $6}'; }
    best=$(grep -E "^\| 4,16,2048,$d \| f16 \| $c \| " $L/bench/bench-bwd.md | head -1 | awk -F'|' '{gsub(/^ +| +$/,"",$10); gsub(/ /,"",$11); gsub(/ /,"",$14); print $10" | "$11" | "$14}')
    echo "| $d | $c | $(us $A) | $(us $P) | $best |"
  done; done
  echo "(${SECONDS}s)"
} | tee -a $R
