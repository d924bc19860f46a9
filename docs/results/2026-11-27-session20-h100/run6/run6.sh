# Sixth run of session 20 (H100): the final tree's binary (d42b912: run4's kernels and bench; the
# copy and the read probes moved to xtask/src/bench/bandwidth.rs). The decode suite's long row and
# (8,32,8,1,8192), without peers: that the copy and both probes still time, and the rows as run4.
# Run from the repo root: bash docs/results/2026-11-27-session20-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs6; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 $X bench-all --suite decode --case sk32768-d128/contig --case sk32768-d128/paged --case b8-hq32-hkv8-sq1-sk8192-d128/contig --case b8-hq32-hkv8-sq1-sk8192-d128/paged --kernels persistent-hopper --no-peers --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
grep -E "persistent-hopper: " $L/bench-decode.log | sed 's/ TFLOP.*//' | tee -a $R
grep -E "copy [0-9]|read probe" $L/bench-decode.log | tee -a $R
sed -n '/### Read probes/,/^## All/p' $L/decode/bench-decode.md | head -14 | tee -a $R
pack
