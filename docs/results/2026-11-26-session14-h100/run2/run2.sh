# Second run of session 14 (H100): the plan now takes three consumer warpgroups for dense D = 64
# problems whose 192-row items fill four rounds of the SMs (run1: verify, reliability and sanitize
# of those builds; their PTX is what the default plan now compiles).
# (1) the prefill ladder with every peer in the same run (SDPA flash, cuDNN; FA3 through
#     flash-attn3-jax in its own process), fp16;
# (2) the one row left below 1.0 in session 9, (4,16,2048,128) non-causal, and the D = 64 rows:
#     tile variants through the environment, no peers, two passes: the default (176 keys, one Q
#     buffer, 240 registers at D = 128); 128-key tiles (two Q buffers); 128-key tiles with 3
#     stages and one Q buffer; at D = 64, three warpgroups with 3 K/V stages.
# Needs in .carry/: xtask, anchors/, flash_attn3_jax-0.2.3-cp312-*.whl, einops-*.whl.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
H=persistent-hopper
SECONDS=0
timeout 300 $X bench-all --suite ladder --kernels $H --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md; cp /tmp/ladder/*.json $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|fa3[a-z-]*) \| [a-z]" /tmp/ladder/bench-all.md | cut -d"|" -f2-8 | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+ \|" /tmp/ladder/bench-all.md | tee -a $R
v() { # name, shapes, env...
  local name=$1 shapes=$2; shift 2
  env "$@" timeout 60 $X bench-all --kernels $H $shapes --dtypes f16 --no-peers --out-dir /tmp/b2-$name > $L/bench-$name.log 2>&1
  echo "$name (rc=$?): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]' /tmp/b2-$name/bench-all.md | cut -d'|' -f2,4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
}
for i in 1 2; do
  v d128-default-$i "--shape 4,16,2048,128 --causal off" A=1
  v d128-bn128-$i "--shape 4,16,2048,128 --causal off" FLASHCORE_HOPPER_BLOCK_N=128
  v d128-bn128-s3-$i "--shape 4,16,2048,128 --causal off" FLASHCORE_HOPPER_BLOCK_N=128 FLASHCORE_HOPPER_STAGES=3 FLASHCORE_HOPPER_Q_STAGES=1
  v d64-default-$i "--shape 4,16,2048,64 --shape 2,16,8192,64 --causal both" A=1
  v d64-s3-$i "--shape 4,16,2048,64 --shape 2,16,8192,64 --causal both" FLASHCORE_HOPPER_STAGES=3
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
