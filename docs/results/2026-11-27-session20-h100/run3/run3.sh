# Third run of session 20 (H100): the decode kernel's K/V by TMA (FC_DECODE_TMA,
# FLASHCORE_DECODE_TMA=1: warp 0 issues 64-row boxes, 128-byte swizzle, a page's rows at a time,
# completing on a stage's mbarrier), after run2's row-by-row bulk copies were 17-22 % slower
# (256-byte copies: the copy engine's rate per copy) and run1's TMA read probe 1.5-2 % faster
# than the LSU one.
# Correctness first (verify through the forced decode kernel with swept split counts, and the
# default plans, TMA on), then five rows, contiguous and paged, alternated with the default.
# Run from the repo root with this tree's stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-27-session20-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs3; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
(FLASHCORE_DECODE_TMA=1 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper --cases 300 --seed 3001 > $L/verify-sweep.log 2>&1; echo "verify tma forced sweep rc=$?" >> $L/rc.txt) &
(FLASHCORE_DECODE_TMA=1 timeout 300 $X verify --kernels persistent-hopper --cases 300 --seed 3002 > $L/verify-default.log 2>&1; echo "verify tma default plans rc=$?" >> $L/rc.txt) &
wait
cat $L/rc.txt | tee -a $R
for f in sweep default; do echo "verify $f: $(tail -1 $L/verify-$f.log)" | tee -a $R; done
grep -E "FAIL" $L/verify-*.log | head -5 | tee -a $R
CASES="--case sk32768-d128/contig --case sk32768-d128/paged --case b8-hq32-hkv8-sq1-sk8192-d128/contig --case b8-hq32-hkv8-sq1-sk8192-d128/paged --case b16-hq64-hkv8-sq1-sk8192-d128/contig --case b16-hq64-hkv8-sq1-sk8192-d128/paged --case b8-hq32-hkv32 --case b32-hq32"
dec() { # name, env...
  local n=$1; shift
  env "$@" timeout 150 $X bench-all --suite decode $CASES --kernels persistent-hopper --no-peers --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n ($*): rc=$?" | tee -a $R
  grep -E "persistent-hopper: " $L/$n.log | sed 's/ TFLOP.*//' | tee -a $R
}
dec default-1 X=1
dec tma-1 FLASHCORE_DECODE_TMA=1
dec default-2 X=1
dec tma-2 FLASHCORE_DECODE_TMA=1
pack
