# Fifth run of session 21 (H100): a lean loader for the decode kernel's small pages, after run4's
# source view found the block-16 case's warps waiting on the block-table load (21 % of stall
# samples at its first use) and issuing ~200 more instructions a tile than the contiguous case.
# FLASHCORE_DECODE_EXP (an experiment switch, FC_DECODE_EXP): 0 the current kernel (the same
# SASS); 1 full tiles of small pages copied from each lane's group pointer with offsets fixed per
# thread (16 shuffles, 16 copies and their adds a K/V tile pair); 2 the same, the pointers read a
# tile ahead of their copies.
# (1) verify through the forced decode kernel with swept split counts at 1 and 2, default plans at
# 2; (2) the paged suite's decode case at 0, 1, 2, twice, then each once with the pages in order.
# Needs .carry/xtask (this tree). From the repo root:
#   bash docs/results/2026-11-27-session21-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs5; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(FLASHCORE_DECODE_EXP=1 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 240 $X verify --kernels persistent-hopper --cases 300 --seed 2501 > $L/verify-sweep1.log 2>&1; echo "verify exp1 forced sweep rc=$?" >> $L/rc.txt) &
(FLASHCORE_DECODE_EXP=2 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 240 $X verify --kernels persistent-hopper --cases 300 --seed 2502 > $L/verify-sweep2.log 2>&1; echo "verify exp2 forced sweep rc=$?" >> $L/rc.txt) &
(FLASHCORE_DECODE_EXP=2 timeout 240 $X verify --kernels persistent-hopper --cases 200 --seed 2503 > $L/verify-default2.log 2>&1; echo "verify exp2 default plans rc=$?" >> $L/rc.txt) &
wait
cat $L/rc.txt | tee -a $R
for f in sweep1 sweep2 default2; do echo "verify $f: $(tail -1 $L/verify-$f.log)" | tee -a $R; done
grep -E "FAIL" $L/verify-*.log | head -5 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
pack
ab() { # name, env...
  local n=$1; shift
  env "$@" timeout 100 $X bench-all --suite paged --case decode/ --kernels persistent-hopper --no-peers --out-dir $L/p-$n > $L/p-$n.log 2>&1
  echo "== paged suite, $n ($*): rc=$?" | tee -a $R
  grep -E "^\| decode/.*persistent-hopper" $L/p-$n/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  grep -E "time / contiguous time" $L/p-$n/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
  pack
}
for i in 1 2; do
  ab exp0-$i FLASHCORE_DECODE_EXP=0
  ab exp1-$i FLASHCORE_DECODE_EXP=1
  ab exp2-$i FLASHCORE_DECODE_EXP=2
done
for e in 0 1 2; do ab exp$e-inorder FLASHCORE_DECODE_EXP=$e FLASHCORE_BENCH_PAGE_ORDER=in-order; done
echo "(${SECONDS}s)" | tee -a $R
