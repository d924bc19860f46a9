# Seventh run of session 13 (H100). This tree adds FLASHCORE_HOPPER_BWD_ROTATE (default 1): without
# causal masking a unit's query walk starts at block (key block mod query blocks), so a head's CTAs
# stop reducing into the same dQ slice at the same time. Run6's prefetch (FLASHCORE_HOPPER_BWD_PREFETCH)
# is still in, default 1.
# (1) verify --pass bwd on persistent-hopper with FLASHCORE_HOPPER_DEBUG=1 (defaults);
# (2) bench, no peers, the same binary, rotate x prefetch, alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
FLASHCORE_HOPPER_DEBUG=1 timeout 240 $X verify --pass bwd --kernels $H --cases 250 --seed 13701 > $L/verify-debug.log 2>&1; echo "verify debug rc=$? (${SECONDS}s)" | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick" $L/verify-debug.log | head -6 | tee -a $R
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | cut -d'|' -f2,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 1,16,8192,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in r0p0 r1p0 r0p1 r1p1; do SECONDS=0
  RO=${v:1:1}; PF=${v:3:1}
  FLASHCORE_HOPPER_BWD_ROTATE=$RO FLASHCORE_HOPPER_BWD_PREFETCH=$PF timeout 150 $X bench-all --pass bwd --kernels $H $S --causal off --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "rotate $RO prefetch $PF pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
