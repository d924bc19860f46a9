# Seventh run of session 16 (H100): timing of the L2 prefetch before griddepcontrol.wait, the
# default plans (prefetch on) against FLASHCORE_HOPPER_PREFETCH=0 FLASHCORE_DECODE_PREFETCH=0,
# alternated twice: the mission shape (graph replay), the decode suite's contiguous and paged-64
# rows, and the prefill ladder (no peers).
# Needs in .carry/: xtask (2883df6 before its plan rule for the prefetch was narrowed: the same
# modules as 2883df6 with FLASHCORE_HOPPER_PREFETCH=1 FLASHCORE_DECODE_PREFETCH=1).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs7; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do for v in on off; do
  E=A=1; [ $v = off ] && E="FLASHCORE_HOPPER_PREFETCH=0 FLASHCORE_DECODE_PREFETCH=0"
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v$rep > $L/mission-$v$rep.log 2>&1
  echo "mission $v $rep rc=$?: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v$rep/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  SECONDS=0
  env $E timeout 140 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case /contig --case /paged-64 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "decode $v $rep rc=$? (${SECONDS}s)" | tee -a $R
  pack
done; done
echo "| row | storage | on1 | off1 | on2 | off2 |" | tee -a $R
paste -d'|' <(grep -E "^\| B=" $L/on1/bench-decode.md | cut -d'|' -f2,5,6) \
  <(grep -E "^\| B=" $L/off1/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/on2/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/off2/bench-decode.md | cut -d'|' -f6) | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
for v in on off; do
  E=A=1; [ $v = off ] && E="FLASHCORE_HOPPER_PREFETCH=0 FLASHCORE_DECODE_PREFETCH=0"
  SECONDS=0
  env $E timeout 100 $X bench-all --suite ladder --kernels persistent-hopper --no-peers --out-dir $L/l-$v > $L/ladder-$v.log 2>&1
  echo "ladder $v rc=$? (${SECONDS}s): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+ \|' $L/l-$v/bench-all.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  pack
done
