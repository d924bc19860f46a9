# Fifth run of session 20 (H100): do the paged rows' shuffled pages cost less when the CTAs that
# read one page share a GPC? A diagnostic build puts the decode kernel's CTAs in clusters
# (FLASHCORE_DECODE_CLUSTER=N, __cluster_dims__(N,1,1); nothing in the kernel uses the cluster):
# in unsplit plans consecutive CTAs are one sequence's KV heads, which read the same pages. If
# address translation is the shuffled pages' cost (run1: 1.4-3.8 %) and a GPC's CTAs share it,
# the paged rows should move toward the contiguous ones.
# Run from the repo root with this tree's stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-27-session20-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs5; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
CASES="--case sk32768-d128/contig --case sk32768-d128/paged --case b16-hq64-hkv8-sq1-sk8192-d128/contig --case b16-hq64-hkv8-sq1-sk8192-d128/paged --case b32-hq32-hkv8-sq1-sk4096-d128/contig --case b32-hq32-hkv8-sq1-sk4096-d128/paged --case b8-hq32-hkv32-sq1-sk8192-d128/contig --case b8-hq32-hkv32-sq1-sk8192-d128/paged"
dec() { # name, env...
  local n=$1; shift
  env "$@" timeout 150 $X bench-all --suite decode $CASES --kernels persistent-hopper --no-peers --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n ($*): rc=$?" | tee -a $R
  grep -E "persistent-hopper: " $L/$n.log | sed 's/ TFLOP.*//' | tee -a $R
}
dec default-1 X=1
dec cluster8-1 FLASHCORE_DECODE_CLUSTER=8
dec cluster2-1 FLASHCORE_DECODE_CLUSTER=2
dec default-2 X=1
dec cluster8-2 FLASHCORE_DECODE_CLUSTER=8
dec cluster4-2 FLASHCORE_DECODE_CLUSTER=4
pack
