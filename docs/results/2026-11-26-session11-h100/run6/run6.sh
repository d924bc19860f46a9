# Sixth run of session 11 (H100): run5's L2 sections made the atomic schedule 3-13 % faster at
# D = 128 but 5-7 % slower at D = 64. Does a rotated query walk (FC_BWD_ROTATE: each key tile of a
# head starts at a different query tile, so their dQ reductions do not meet on the same rows)
# help, with and without sections? Atomic schedule only, run4's best dQ tile, no peers, fp16.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64"
i=0
for v in "0 -" "default -" "0 ,FC_BWD_ROTATE=1" "default ,FC_BWD_ROTATE=1" "0 -"; do
  set -- $v; sec=$1; rot=$2; [ $rot = - ] && rot=""
  i=$((i+1)); SECONDS=0
  export FLASHCORE_PORTABLE_DQ_DEFINES=FC_DQ_TILE_COLS=32,FC_DQ_UNROLL=4$rot
  if [ $sec = default ]; then unset FLASHCORE_PORTABLE_BWD_SECTION_HEADS; else export FLASHCORE_PORTABLE_BWD_SECTION_HEADS=$sec; fi
  timeout 100 $X bench-all --pass bwd --kernels persistent-portable-atomic $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b$i > $L/bench-$i.log 2>&1; echo "$i sections=$sec rotate=${rot:-no} rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable-atomic \| [0-9.]+ \| [0-9.]+ \|" /tmp/b$i/bench-bwd.md | head -10 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
