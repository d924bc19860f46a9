# Eleventh device run: ncu on the (1,8,512,64) causal problem, the Hopper path's dense build before
# the modes (.carry/xtask-old, 3d690b3) and now: time, instructions, registers, grid, shared memory.
# Run from the repo root: bash docs/results/2026-11-25-modes-h100/run11/run11.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run11.txt
C='b=1,hq=8,hkv=8,sq=512,sk=512,d=64,dtype=f16,causal=1,layout=bshd,seed=1'
M=gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg
for b in xtask-old xtask; do
  timeout 120 ncu --kernel-name regex:attention_persistent_hopper --launch-count 3 --metrics $M .carry/$b verify --kernels persistent-hopper --case "$C" > $OUT/ncu-$b.log 2>&1; echo "ncu $b rc=$?" | tee -a $R
  grep -E "attention_persistent_hopper|gpu__time|inst_executed|registers|grid_size|block_size|shared_mem|warps_active|cycles_active" $OUT/ncu-$b.log | head -24 | tee -a $R
done
