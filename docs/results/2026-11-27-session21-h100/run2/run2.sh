# Second run of session 21 (H100): the decode kernel loads a paged tile's 16-row groups (pages of
# 16, 32 or 48 rows) as small strided tiles (load_tile_async's full-tile path: offsets computed
# once, no per-copy bounds) instead of copy by copy. Run1 found block 16 at 1.05x contiguous
# with the pages in order (the loader) and 1.10x shuffled.
# (1) verify through the forced decode kernel with swept split counts, and the default plans;
# (2) the paged suite's decode cases, alternated twice between the session's starting kernels
# (xtask-base, b707d95) and the new ones (xtask), then once each with the pages in order.
# Needs in .carry/: xtask (this tree) and xtask-base. From the repo root:
#   bash docs/results/2026-11-27-session21-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; B=.carry/xtask-base; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 240 $X verify --kernels persistent-hopper --cases 400 --seed 2201 > $L/verify-sweep.log 2>&1; echo "verify forced sweep rc=$?" >> $L/rc.txt) &
(FLASHCORE_DECODE=force timeout 240 $X verify --kernels persistent-portable --cases 200 --seed 2203 > $L/verify-portable.log 2>&1; echo "verify portable forced rc=$?" >> $L/rc.txt) &
(timeout 240 $X verify --kernels persistent-hopper --cases 300 --seed 2202 > $L/verify-default.log 2>&1; echo "verify default plans rc=$?" >> $L/rc.txt) &
wait
cat $L/rc.txt | tee -a $R
for f in sweep portable default; do echo "verify $f: $(tail -1 $L/verify-$f.log)" | tee -a $R; done
grep -E "FAIL" $L/verify-*.log | head -5 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
pack
ab() { # name, binary, env...
  local n=$1 x=$2; shift 2
  env "$@" timeout 100 $x bench-all --suite paged --case decode/ --kernels persistent-hopper --no-peers --out-dir $L/p-$n > $L/p-$n.log 2>&1
  echo "== paged suite, $n ($*): rc=$?" | tee -a $R
  grep -E "^\| decode/.*persistent-hopper" $L/p-$n/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  grep -E "time / contiguous time" $L/p-$n/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
  pack
}
ab base-1 $B X=1
ab new-1 $X X=1
ab base-2 $B X=1
ab new-2 $X X=1
ab base-inorder $B FLASHCORE_BENCH_PAGE_ORDER=in-order
ab new-inorder $X FLASHCORE_BENCH_PAGE_ORDER=in-order
echo "(${SECONDS}s)" | tee -a $R
