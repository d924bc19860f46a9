# Ninth run of session 16 (H100), the final tree (5aa5141; kernels as 2883df6):
# (1) the portable path through the decode kernel with the L2 prefetch (split plans on sm_90):
#     verify --cases 1000 through the forced decode kernel with swept split counts; determinism
#     and streams;
# (2) the portable path's decode rows (contiguous, paged-64), no peers;
# (3) (4,16,2048,128) non-causal, the one ladder row under 1.0x (level with cuDNN): the plan's
#     default against 128-key tiles and against the static schedule, eager, two alternations.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L /tmp/v9
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs9; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) & }
run sweep-portable FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-portable --cases 1000 --seed 1641
run reliability timeout 300 $X reliability --only determinism,streams --kernels persistent-portable
wait
sort /tmp/v9/rc.txt | tee -a $R
echo "sweep-portable: $(grep -h 'passed, ' $L/sweep-portable.log | tail -1)" | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/sweep-portable.log | head -10 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
pack
SECONDS=0
timeout 140 $X bench-all --suite decode --kernels persistent-portable --no-peers --case /contig --case /paged-64 --out-dir $L/portable > $L/bench-portable.log 2>&1
echo "portable decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/portable/bench-decode.md | cut -d'|' -f2,5,6,7,8 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-160 | tee -a $R
pack
for rep in 1 2; do for v in default bn128 static; do
  case $v in default) E=A=1;; bn128) E=FLASHCORE_HOPPER_BLOCK_N=128;; static) E=FLASHCORE_HOPPER_DYNAMIC=0;; esac
  env $E timeout 60 $X bench-all --shape 4,16,2048,128 --causal off --dtypes f16 --kernels persistent-hopper --no-peers --out-dir $L/l-$v$rep > $L/l-$v$rep.log 2>&1
  echo "(4,16,2048,128) $v $rep rc=$?: $(grep -E '^\| 4,16,2048,128 \| f16 \| no \| persistent-hopper \| [0-9.]+ \|' $L/l-$v$rep/bench-all.md | cut -d'|' -f6,7 | tr -s ' ')" | tee -a $R
done; done
pack
