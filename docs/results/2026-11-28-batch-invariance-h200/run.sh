#!/usr/bin/env bash
# Batch invariance on the H200 (docs/MODES.md, "Batch invariance").
#   check: reliability modes + batchinv (generation 5 and tile64), verify --batch-invariant on
#          both generation-5 paths (and with 1-tile key chunks), the default plans, sanitize.
#   cost:  the ladder and the mission shape, default (with the peers) then --batch-invariant.
#   suites: the decode suite (with the peers), varlen and paged, default then --batch-invariant;
#          the backward beside its peers.
#   reliability: every reliability check on both generation-5 paths.
# From the repo root, with a release xtask of the tree in .carry/xtask and, for cost/suites, the
# flash-attn3-jax and einops wheels in .carry/:
#   bash docs/results/2026-11-28-batch-invariance-h200/run.sh check|cost|suites|reliability
set -u
PHASE=${1:-check}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/$PHASE.txt; L=/tmp/logs-$PHASE; mkdir -p $L
pack() { (cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs-$PHASE); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $R
git log -1 --format='tree: %h %s' 2>/dev/null | tee -a $R
SECONDS=0
fa3() { python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R; }
cmp() { # label base.json other.json
  echo "== $1" | tee -a $R
  python3 bench/compare_runs.py "$2" "$3" --label bi | tee -a $R
}
case $PHASE in
check)
  G5=persistent-hopper,persistent-portable
  (timeout 330 $X reliability --only modes,batchinv --kernels $G5,tile64 --json $L/rel.json > $L/reliability.log 2>&1; echo "reliability modes,batchinv rc=$?" >> $L/rc.txt) &
  (timeout 330 $X verify --batch-invariant --kernels persistent-hopper --cases 1000 --seed 2811 > $L/verify-bi-hopper.log 2>&1; echo "verify --batch-invariant hopper rc=$?" >> $L/rc.txt) &
  (timeout 330 $X verify --batch-invariant --kernels persistent-portable --cases 1000 --seed 2812 > $L/verify-bi-portable.log 2>&1; echo "verify --batch-invariant portable rc=$?" >> $L/rc.txt) &
  (FLASHCORE_DECODE_CHUNK_TILES=1 timeout 330 $X verify --batch-invariant --kernels $G5 --cases 300 --seed 2813 > $L/verify-bi-chunk1.log 2>&1; echo "verify --batch-invariant, 1-tile chunks rc=$?" >> $L/rc.txt) &
  (timeout 330 $X verify --kernels $G5 --cases 300 --seed 2814 > $L/verify-default.log 2>&1; echo "verify default rc=$?" >> $L/rc.txt) &
  (timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san > $L/sanitize.log 2>&1; echo "sanitize fwd hopper rc=$?" >> $L/rc.txt) &
  wait
  sort $L/rc.txt | tee -a $R
  for f in $L/verify-*.log; do echo "$(basename $f): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
  grep -E "^\| (modes|batchinv) " $L/reliability.log | cut -c1-400 | tee -a $R
  grep -E "FAIL" $L/reliability.log | cut -c1-600 | head -8 | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ;;
cost)
  fa3
  timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/ladder > $L/ladder.log 2>&1; echo "ladder default rc=$? (${SECONDS}s)" | tee -a $R
  timeout 150 $X bench-all --suite ladder --kernels persistent-hopper --no-peers --batch-invariant --out-dir $L/ladder-bi > $L/ladder-bi.log 2>&1; echo "ladder bi rc=$? (${SECONDS}s)" | tee -a $R
  cmp "ladder: --batch-invariant / default (flashcore), best peer of the default run" $L/ladder/bench-all.json $L/ladder-bi/bench-all.json
  cp $L/ladder/bench-all.md $OUT/bench-ladder.md 2>/dev/null
  pack
  ;;
suites)
  fa3
  timeout 180 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/decode > $L/decode.log 2>&1; echo "decode default rc=$? (${SECONDS}s)" | tee -a $R
  timeout 100 $X bench-all --suite decode --kernels persistent-hopper --no-peers --no-gemm --batch-invariant --out-dir $L/decode-bi > $L/decode-bi.log 2>&1; echo "decode bi rc=$? (${SECONDS}s)" | tee -a $R
  cmp "decode: --batch-invariant / default" $L/decode/bench-decode.json $L/decode-bi/bench-decode.json
  cp $L/decode/bench-decode.md $OUT/bench-decode.md 2>/dev/null
  for s in varlen paged; do
    timeout 60 $X bench-all --suite $s --kernels persistent-hopper --no-peers --out-dir $L/$s > $L/$s.log 2>&1; echo "$s default rc=$? (${SECONDS}s)" | tee -a $R
    timeout 60 $X bench-all --suite $s --kernels persistent-hopper --no-peers --batch-invariant --out-dir $L/$s-bi > $L/$s-bi.log 2>&1; echo "$s bi rc=$? (${SECONDS}s)" | tee -a $R
    cmp "$s: --batch-invariant / default" $L/$s/bench-$s.json $L/$s-bi/bench-$s.json
  done
  pack
  ;;
reliability)
  timeout 560 $X reliability --kernels persistent-hopper,persistent-portable --json $L/rel.json > $L/reliability.log 2>&1; echo "reliability (all checks) rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [a-z]+ \| persistent" $L/reliability.log | cut -c1-300 | tee -a $R
  grep -E "FAIL|reliability:" $L/reliability.log | cut -c1-400 | head -12 | tee -a $R
  pack
  ;;
batchinv)
  timeout 400 $X reliability --only batchinv --kernels persistent-hopper,persistent-portable,tile64 --json $L/rel.json > $L/batchinv.log 2>&1; echo "reliability batchinv rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| batchinv " $L/batchinv.log | tr ';' '\n' | cut -c1-200 | tee -a $R
  grep -E "reliability:|panicked" $L/batchinv.log | tee -a $R
  pack
  ;;
causal64)
  # After two warpgroups became the batch-invariant rule under causal masking: batchinv on the
  # Hopper path, and the two causal D = 64 ladder rows that took three, default then the mode.
  timeout 200 $X reliability --only batchinv --kernels persistent-hopper --json $L/rel.json > $L/batchinv.log 2>&1; echo "reliability batchinv hopper rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| batchinv " $L/batchinv.log | tr ';' '\n' | grep -E "dense|FAIL|PASS" | cut -c1-200 | tee -a $R
  for m in default bi; do
    flag=; [ $m = bi ] && flag=--batch-invariant
    timeout 90 $X bench-all --shape 4,16,2048,64 --shape 2,16,8192,64 --causal on --kernels persistent-hopper --no-peers $flag --out-dir $L/c64-$m > $L/c64-$m.log 2>&1; echo "causal D=64 $m rc=$? (${SECONDS}s)" | tee -a $R
  done
  cmp "causal D=64 ladder rows: --batch-invariant / default" $L/c64-default/bench-all.json $L/c64-bi/bench-all.json
  pack
  ;;
final)
  # After the decode chunk became 4096 keys (2048 from 16384 keys on): batchinv and an oracle
  # sweep with 4-tile chunks (units of 16 tiles or more take 2), then the decode rows whose
  # split count changed, default with the peers and then the mode.
  (timeout 200 $X reliability --only batchinv --kernels persistent-hopper --json $L/rel.json > $L/batchinv.log 2>&1; echo "reliability batchinv hopper rc=$?" >> $L/rc.txt) &
  (FLASHCORE_DECODE_CHUNK_TILES=4 timeout 200 $X verify --batch-invariant --kernels persistent-hopper --cases 300 --no-edge --seed 2815 > $L/verify-bi-chunk4.log 2>&1; echo "verify --batch-invariant, 4-tile chunks rc=$?" >> $L/rc.txt) &
  wait
  sort $L/rc.txt | tee -a $R
  grep -E "passed, .* failed" $L/verify-bi-chunk4.log | tail -1 | tee -a $R
  grep -E "^\| batchinv " $L/batchinv.log | cut -d'|' -f2-4 | tee -a $R
  grep -E "FAIL" $L/batchinv.log | cut -c1-400 | head -3 | tee -a $R
  ROWS="--case b8-hq32-hkv8-sq1- --case b32-hq32 --case b16-hq64 --case hkv32-sq1"
  fa3
  timeout 110 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --no-gemm $ROWS --out-dir $L/decode > $L/decode.log 2>&1; echo "decode default rc=$? (${SECONDS}s)" | tee -a $R
  timeout 80 $X bench-all --suite decode --kernels persistent-hopper --no-peers --no-gemm --batch-invariant $ROWS --out-dir $L/decode-bi > $L/decode-bi.log 2>&1; echo "decode bi rc=$? (${SECONDS}s)" | tee -a $R
  cmp "decode: --batch-invariant / default" $L/decode/bench-decode.json $L/decode-bi/bench-decode.json
  grep -E "^\| B=.*contiguous|^\| B=.*paged" $L/decode/bench-decode.md | cut -d'|' -f2,5,6,10,11 | tee -a $R
  pack
  ;;
rest)
  # Every check but batchinv (its own run), with the long loops shortened to fit one call.
  (timeout 420 $X reliability --kernels persistent-hopper,persistent-portable --only badinput,oob,determinism,grid,nonfinite,modes,oom,soak,streams,backward --no-huge --soak-cases 1500 --persistent-runs 200 --backward-runs 200 --json $L/rel.json > $L/reliability.log 2>&1; echo "reliability rc=$?" >> $L/rc.txt) &
  wait
  cat $L/rc.txt | tee -a $R
  grep -E "^\| [a-z]+ \| persistent" $L/reliability.log | cut -c1-240 | tee -a $R
  grep -E "reliability:" $L/reliability.log | tee -a $R
  timeout 60 $X bench-all --suite decode --kernels persistent-hopper --no-peers --no-gemm --batch-invariant --case sq128- --case sq4- --out-dir $L/decode-bi2 > $L/decode-bi2.log 2>&1; echo "decode bi (last two rows) rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| " $L/decode-bi2/bench-decode.md | grep -E "persistent-hopper" | cut -c1-200 | head -8 | tee -a $R
  timeout 100 $X bench-all --pass bwd --shape 4,16,2048,64 --shape 4,16,2048,128 --kernels persistent-hopper --out-dir $L/bwd > $L/bwd.log 2>&1; echo "backward rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/bwd/bench-bwd.md $OUT/bench-bwd.md 2>/dev/null
  pack
  ;;
esac
echo "(${SECONDS}s total)" | tee -a $R
