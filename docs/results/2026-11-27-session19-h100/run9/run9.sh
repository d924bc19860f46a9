# Ninth run of session 19 (H100): the final tree's binary (its kernels are run2's; since then only
# xtask changed: the copy and the read probe timed through one helper, FLASHCORE_BENCH_INPUT_SETS).
# The decode suite's long row alone, without peers: that the copy and the read probe still time.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs9; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 $X bench-all --suite decode --case sk32768 --kernels persistent-hopper --no-peers --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | cut -c1-200 | head -4 | tee -a $R
sed -n '/### Copy ceiling/,/^$/p' $L/decode/bench-decode.md | head -8 | tee -a $R
grep -E "copy|probe" $L/bench-decode.log | head -6 | tee -a $R
pack
