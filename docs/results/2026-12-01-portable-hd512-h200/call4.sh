#!/usr/bin/env bash
# On nvidia-h200, in one call, side by side:
# - candle-flash-attn 0.11.1's own test file against flashcore-candle (crates/candle/tests/
#   flash_attn_tests.rs, upstream's but for its `use` line), whose sixth test
#   (`flash_attn_varlen_paged_shuffled_block_table_hd512`: 296 packed queries, a paged cache of
#   32-row blocks) now runs on the portable 512 build instead of the scalar forward;
# - verify of the portable forward at head dims 264, 384 and 504 (150 cases), and two hand-made
#   cases with `mm_prefix_ranges` at padded head dims past one round of items, which the plan
#   keeps on the static schedule.
# From the repo root, with .carry/xtask and .carry/cb.xz (the stripped flash_attn_tests binary of
# `cargo build --release -p flashcore-candle --features cuda --test flash_attn_tests`, xz).
# Outputs in $OUT: call4.txt, flash_attn_tests.txt, logs-call4.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call4.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L /tmp/cb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
xz -dc .carry/cb.xz > /tmp/cb/flash_attn_tests && chmod +x /tmp/cb/flash_attn_tests
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
P=persistent-portable
job verify-padded 200 $X verify --kernels $P --head-dims 264,384,504 --no-edge --cases 150 --seed 51401
job case-mm-384 200 $X verify --kernels $P --no-shrink --case "b=4,hq=16,hkv=4,sq=1024,sk=1024,d=384,dtype=bf16,causal=1,layout=bhsd,seed=7,mm=2"
job case-mm-264 200 $X verify --kernels $P --no-shrink --case "b=4,hq=16,hkv=2,sq=800,sk=1000,d=264,dtype=f16,causal=0,layout=bshd,seed=8,wl=64,mm=3"
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')${LD_LIBRARY_PATH:-}
timeout 180 /tmp/cb/flash_attn_tests --test-threads 1 > $OUT/flash_attn_tests.txt 2>&1
echo "flash_attn_tests rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^test |test result" $OUT/flash_attn_tests.txt | tee -a $R
wait
sort $L/rc.txt | tee -a $R
for f in $L/*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked|error" $L/*.log | cut -c1-300 | head -8 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call4.tar.xz logs-call4)
