# Second run of session 20 (H100): the decode kernel's K/V by bulk copies (FC_DECODE_BULK,
# FLASHCORE_DECODE_BULK=1: cp.async.bulk a row per thread into row-padded tiles, a stage's
# mbarrier), after run1 found a TMA read stream 1.5-2 % faster than the LSU probe and the
# shuffled pages' cost in the LSU path.
# Correctness first (verify through the forced decode kernel with swept split counts, and the
# default plans, bulk on), then the three rows contiguous and paged, alternated with the default.
# Run from the repo root with this tree's stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-27-session20-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
(FLASHCORE_DECODE_BULK=1 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper --cases 300 --seed 2001 > $L/verify-sweep.log 2>&1; echo "verify bulk forced sweep rc=$?" >> $L/rc.txt) &
(FLASHCORE_DECODE_BULK=1 timeout 300 $X verify --kernels persistent-hopper --cases 300 --seed 2002 > $L/verify-default.log 2>&1; echo "verify bulk default plans rc=$?" >> $L/rc.txt) &
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
dec bulk-1 FLASHCORE_DECODE_BULK=1
dec default-2 X=1
dec bulk-2 FLASHCORE_DECODE_BULK=1
pack
