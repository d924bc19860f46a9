#!/usr/bin/env bash
# The backward with windows (causal included), softcap and ALiBi on the H200, in one call:
# - verify --pass bwd of the scalar backward and both portable schedules (random cases drawn with
#   the modes each kernel claims, GQA, and the mode edges), and of the Hopper backward, whose mode
#   cases must count as skipped;
# - sanitize --pass bwd (its sweep has a causal window with softcap and ALiBi over rows with no
#   key, and windows on both sides with ALiBi per head);
# - reliability --only backward (nan-padding, determinism with a window+softcap+ALiBi problem,
#   grid limits) at D = 128 and at 64 and 192;
# - racecheck of the portable forward's equal-dims builds on the case whose (192, 128) build
#   showed an intra-warp warning (docs/results/2026-11-29-head-dim-v-h200).
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-bwd-modes-h200/run.sh
# Outputs in $OUT/bwd-modes: bwd.txt (the summary), logs-bwd.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/bwd-modes; mkdir -p $O
X=.carry/xtask; R=$O/bwd.txt; L=/tmp/logs-bwd; rm -rf $L; mkdir -p $L
S=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-atomic 420 $X verify --pass bwd --kernels $A --cases 400 --seed 3901
job verify-det 420 $X verify --pass bwd --kernels $P --cases 400 --seed 3902
job verify-scalar 420 $X verify --pass bwd --kernels scalar --cases 200 --seed 3903
job verify-hopper 420 $X verify --pass bwd --kernels persistent-hopper --cases 150 --seed 3904
job sanitize 420 $X sanitize --pass bwd --kernels scalar,$P,$A --logs $L/san
(timeout 200 $X reliability --kernels scalar,$P,$A --only backward --no-huge > $L/reliability.log 2>&1
 echo "reliability rc=$? (${SECONDS}s)" >> $L/rc.txt
 timeout 200 $X reliability --kernels $P,$A --head-dims 64,192 --only backward --no-huge > $L/reliability-64-192.log 2>&1
 echo "reliability 64,192 rc=$? (${SECONDS}s)" >> $L/rc.txt) &
(for d in 192 128; do
   timeout 120 $S --tool racecheck $X verify --kernels $P \
       --case "b=2,hq=16,hkv=16,sq=512,sk=512,d=$d,dtype=bf16,causal=1,layout=bshd,seed=7008" \
       > $L/racecheck-fwd-d$d.log 2>&1
   echo "racecheck fwd d=$d rc=$? (${SECONDS}s): $(grep -h 'RACECHECK SUMMARY' $L/racecheck-fwd-d$d.log)" >> $L/rc.txt
 done) &
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do
  echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1) | last progress: $(grep -E 'cases, [0-9]+ failed' $f | tail -1)" | tee -a $R
done
grep -hE "^\| (scalar|persistent)" $L/verify-*.log | tee -a $R
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -hE "^\| backward \| |^reliability:" $L/reliability*.log | cut -c1-220 | tee -a $R
grep -hE "FAIL|panicked" $L/reliability*.log | cut -c1-400 | head -8 | tee -a $R
grep -h "Race reported" $L/racecheck-fwd-*.log | sort | uniq -c | head -4 | tee -a $R
(cd /tmp && tar cJf $O/logs-bwd.tar.xz logs-bwd)
echo "done (${SECONDS}s)" | tee -a $R
