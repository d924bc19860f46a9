# Sixth run of session 14 (H100): the forward's K/V ring depth, which run2 could not time (the
# 3-stage builds did not compile then). No peers, fp16, three alternations:
#   D = 64 (three consumer warpgroups by default at these shapes): 2 stages (default) against 3;
#   (4,16,2048,128) non-causal: the default (176 keys, 2 stages, one Q buffer) against 128-key
#   tiles with 3 stages and one Q buffer.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=$PWD/.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
v() { # name, shapes, env...
  local name=$1 shapes=$2; shift 2
  env "$@" timeout 60 $X bench-all --kernels $H $shapes --dtypes f16 --no-peers --out-dir /tmp/b6-$name > $L/bench-$name.log 2>&1
  echo "$name (rc=$?): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]' /tmp/b6-$name/bench-all.md | cut -d'|' -f2,4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
}
D64="--shape 4,16,2048,64 --shape 2,16,8192,64 --causal both"
D128="--shape 4,16,2048,128 --causal off"
for i in 1 2 3; do
  v d64-s2-$i "$D64" A=1
  v d64-s3-$i "$D64" FLASHCORE_HOPPER_STAGES=3
  v d128-default-$i "$D128" A=1
  v d128-bn128-s3-$i "$D128" FLASHCORE_HOPPER_BLOCK_N=128 FLASHCORE_HOPPER_STAGES=3 FLASHCORE_HOPPER_Q_STAGES=1
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
