# Seventh run of session 17 (H100): the register epilogue in 16-byte stores (a transpose across
# each quad; run6's faithful timeline put the register epilogue at 1 900-2 900 cycles of each
# ~43 600-cycle unit at (4,16,2048,128), the unit's edges at ~10 %).
# (1) A/B, alternating twice: .carry/xtask-base (db93483's kernels) against .carry/xtask (this
#     tree): the prefill ladder, both masks, no peers; then (4,16,2048,128) non-causal beside SDPA
#     flash and cuDNN, once each;
# (2) correctness of the new epilogue: verify --cases 1000 (default plans; mode problems take the
#     register epilogue too), reliability (determinism, streams, oob), sanitize (forward).
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L /tmp/v7
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs7; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for round in 1 2; do
  for b in base new; do
    x=.carry/xtask; [ $b = base ] && x=.carry/xtask-base
    SECONDS=0
    timeout 150 $x bench-all --suite ladder --causal both --kernels persistent-hopper --no-peers --out-dir $L/l-$b-$round > $L/l-$b-$round.log 2>&1
    echo "== ladder $b round $round: rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/l-$b-$round/bench-all.md | cut -d'|' -f2-8 | tee -a $R
    pack
  done
done
for b in base new; do
  x=.carry/xtask; [ $b = base ] && x=.carry/xtask-base
  timeout 100 $x bench-all --shape 4,16,2048,128 --causal off --kernels persistent-hopper --out-dir $L/p-$b > $L/p-$b.log 2>&1
  echo "== 4,16,2048,128 non-causal with peers, $b: rc=$?" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn) \| [a-z]" $L/p-$b/bench-all.md | cut -d'|' -f2-8 | tee -a $R
done
pack
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) & }
run verify timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 1707
run reliability timeout 300 $X reliability --only determinism,streams,oob --kernels persistent-hopper
run sanitize timeout 300 $X sanitize --pass fwd --kernels persistent-hopper
wait
sort /tmp/v7/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/verify.log | head -10 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
pack
