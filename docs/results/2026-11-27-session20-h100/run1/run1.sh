# First run of session 20 (H100): where the decode rows' last per cents go.
# (a) Is the LSU read probe what bounds a read stream? The TMA bulk probe (read_probe_bulk) in four
#     ring shapes beside it, on the byte counts of the three rows below (the first probe named is
#     the one the report records; every one is printed to the log).
# (b) Paged against contiguous: the same pages in order (FLASHCORE_BENCH_PAGE_ORDER=in-order, the
#     contiguous case's addresses) and an L2 prefetch one tile beyond the ring
#     (FLASHCORE_DECODE_L2_AHEAD=page|tile), alternated with the default.
# Run from the repo root with this tree's stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-27-session20-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs1; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
CASES="--case sk32768-d128/contig --case sk32768-d128/paged --case b8-hq32-hkv8-sq1-sk8192-d128/contig --case b8-hq32-hkv8-sq1-sk8192-d128/paged --case b16-hq64-hkv8-sq1-sk8192-d128/contig --case b16-hq64-hkv8-sq1-sk8192-d128/paged"
dec() { # name, env...
  local n=$1; shift
  env "$@" timeout 150 $X bench-all --suite decode $CASES --kernels persistent-hopper --no-peers --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n ($*): rc=$?" | tee -a $R
  grep -E "^\| B=" $L/$n/bench-decode.md | cut -d'|' -f2,3,4 | head -6 | tee -a $R
}
dec probes FLASHCORE_BENCH_READ_PROBE=ldg,bulk:16384:6:2,bulk:32768:4:1,bulk:8192:12:2,bulk:65536:3:1,ldg
grep -E "copy [0-9]|read probe" $L/probes.log | tee -a $R
dec default-1 X=1
dec in-order-1 FLASHCORE_BENCH_PAGE_ORDER=in-order
dec ahead-page-1 FLASHCORE_DECODE_L2_AHEAD=page
dec ahead-tile-1 FLASHCORE_DECODE_L2_AHEAD=tile
dec default-2 X=1
dec in-order-2 FLASHCORE_BENCH_PAGE_ORDER=in-order
dec ahead-page-2 FLASHCORE_DECODE_L2_AHEAD=page
pack
