# First run of session 21 (H100): the decode kernel's paged page lookups, once a tile for K and V
# (they share the table) and a tile ahead of the copies that need them.
# (1) correctness of the new kernel: verify through the forced decode kernel with swept split
#     counts, and the default plans; (2) the paged suite's decode cases (blocks 16, 64, 256
#     against the contiguous cache) and four decode-suite rows, contiguous and paged 64,
#     alternated twice between the session's starting kernels (xtask-base, b707d95) and the new
#     ones (xtask); (3) both once with the pages in order (FLASHCORE_BENCH_PAGE_ORDER=in-order), to
#     split the paged cost into lookups and placement.
# Two calls on one warm machine (each under the 600 s limit): phase 1 is (1) and the first
# alternation, phase 2 the paged suite's second alternation and (3).
# Needs in .carry/: xtask (this tree) and xtask-base (b707d95's). From the repo root:
#   bash docs/results/2026-11-27-session21-h100/run1/run1.sh 1; then ... run1.sh 2
PHASE=${1:-1}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; B=.carry/xtask-base; R=$OUT/run1-$PHASE.txt; L=/tmp/logs1-$PHASE; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs1-$PHASE; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
if [ $PHASE = 1 ]; then
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 240 $X verify --kernels persistent-hopper --cases 400 --seed 2101 > $L/verify-sweep.log 2>&1; echo "verify forced sweep rc=$?" >> $L/rc.txt) &
(timeout 240 $X verify --kernels persistent-hopper --cases 300 --seed 2102 > $L/verify-default.log 2>&1; echo "verify default plans rc=$?" >> $L/rc.txt) &
wait
cat $L/rc.txt | tee -a $R
for f in sweep default; do echo "verify $f: $(tail -1 $L/verify-$f.log)" | tee -a $R; done
grep -E "FAIL" $L/verify-*.log | head -5 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
pack
fi
DEC="--case sk32768-d128/contig --case sk32768-d128/paged --case b8-hq32-hkv8-sq1-sk8192-d128/contig --case b8-hq32-hkv8-sq1-sk8192-d128/paged --case b16-hq64-hkv8-sq1-sk8192-d128/contig --case b16-hq64-hkv8-sq1-sk8192-d128/paged --case sq4-sk8192-d128/contig --case sq4-sk8192-d128/paged"
ab() { # name, binary, env...
  local n=$1 x=$2; shift 2
  env "$@" timeout 100 $x bench-all --suite paged --case decode/ --kernels persistent-hopper --no-peers --out-dir $L/p-$n > $L/p-$n.log 2>&1
  echo "== paged suite, $n ($*): rc=$?" | tee -a $R
  grep -E "^\| decode/.*persistent-hopper" $L/p-$n/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  grep -E "time / contiguous time" $L/p-$n/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
  [ "$DECODE" = 0 ] && { pack; return; }
  env "$@" timeout 100 $x bench-all --suite decode $DEC --kernels persistent-hopper --no-peers --no-gemm --out-dir $L/d-$n > $L/d-$n.log 2>&1
  echo "== decode suite, $n ($*): rc=$?" | tee -a $R
  grep -E "persistent-hopper: " $L/d-$n.log | sed 's/ TFLOP.*//' | tee -a $R
  pack
}
if [ $PHASE = 1 ]; then
  ab base-1 $B X=1
  ab new-1 $X X=1
else
  # Phase 1 showed the new lookups no faster (block 16 slower): only the paged suite again,
  # shuffled and in order, to split the cost.
  DECODE=0
  ab base-2 $B X=1
  ab new-2 $X X=1
  ab base-inorder $B FLASHCORE_BENCH_PAGE_ORDER=in-order
  ab new-inorder $X FLASHCORE_BENCH_PAGE_ORDER=in-order
fi
echo "(${SECONDS}s)" | tee -a $R
