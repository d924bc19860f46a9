#!/bin/bash
# Decode combine a warp a row where the splits are few, second call: the change (.carry/xtask,
# .carry/flashcore) under every check, main (.carry/flashcore-base, da1dc32) for bit-identity:
# - xtask reliability, every check, on persistent-hopper (the flags of
#   ../2026-12-01-narrow-head-decode-kinds-h200/call2.sh), as two processes side by side: soak
#   alone, every other check in the other;
# - beside them (niced): bitid.sh (O and LSE byte for byte against main on 192 forced-decode
#   problems at 64-512, one, three or twelve splits); verify with the decode kernel forced and a
#   split count drawn per case, 64-512, 16-bit and e4m3 caches, Hopper and portable paths;
#   compute-sanitizer at 128, 256 and 512.
# Output in $OUT: summary.txt, reliability logs and the other logs (logs.tar.xz).
set -u
export PYTHONUNBUFFERED=1
N=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L/bitid
H=docs/results/2026-12-02-decode-combine-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
P=persistent-hopper; D=64,128,256,512
job() { # label timeout nice [VAR=value ...] -- cmd...
  local label=$1 t=$2 n=$3; shift 3
  local vars=(); while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
  (env FLASHCORE_CACHE_DIR=/tmp/fc-$label "${vars[@]}" nice -n $n timeout $t "$@" > $L/$label.log 2>&1
   echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job rel-soak 540 0 -- $N reliability --kernels $P --only soak --soak-cases 1500
job rel-rest 540 0 -- $N reliability --kernels $P --no-huge --persistent-runs 200 --backward-runs 200 \
  --only badinput,oob,determinism,grid,nonfinite,modes,batchinv,oom,streams,backward,cp
job bitid 300 10 -- bash -c "python3 $H/bitid_inputs.py $L/bitid && bash $H/bitid.sh .carry/flashcore-base .carry/flashcore $L/bitid; rm -f $L/bitid/*.npy"
job v-forced 520 19 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep -- $N verify --kernels $P \
  --head-dims $D --cases 800 --seed 51501
job v-forced-e4m3 520 19 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep -- $N verify --kernels $P \
  --head-dims $D --kv-dtype e4m3 --cases 300 --seed 51502
job v-portable 520 19 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep -- $N verify --kernels persistent-portable \
  --head-dims $D --cases 400 --seed 51503
job sanitize 520 19 -- $N sanitize --kernels $P --pass fwd --tools memcheck,racecheck,synccheck,initcheck \
  --head-dims 128,256,512 --logs $L/sanitize
wait
sort $L/rc.txt >> $R
echo "bitid: $(tail -1 $L/bitid.log)" >> $R
grep -E "DIFFERS|rc=[1-9]" $L/bitid.log | head -5 >> $R
for f in rel-rest rel-soak; do grep -E "^\| [a-z]+ \| " $L/$f.log | cut -c1-160 >> $R; grep -E "^reliability: [0-9]" $L/$f.log >> $R; done
for f in v-forced v-forced-e4m3 v-portable; do echo "$f: $(grep -E 'passed, .* failed' $L/$f.log | tail -1)" >> $R; done
grep -hE "FAIL|panicked" $L/v-*.log $L/rel-*.log | cut -c1-300 | head -8 >> $R
echo "sanitize: $(grep -E 'sanitize:' $L/sanitize.log | tail -2 | tr '\n' ' ')" >> $R
grep -E "errors \(" $L/sanitize.log | head -8 >> $R
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
