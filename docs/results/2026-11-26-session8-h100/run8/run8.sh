# Eighth run of session 8 (H100): is the (1,8,512,64) causal regression in the kernel or in how
# it is launched and timed? Kernel durations under ncu without clock or cache control
# (gpu__time_duration of launches 21-25 inside bench-all --suite mission, eager, no peers) for
# 3d690b3 (.carry/xtask-old, before the modes), 13cf0d5 (.carry/xtask-base) and the final tree,
# causal and not, alternated twice; then the graph-replay bench once each, and the launch's
# grid, block, shared memory and registers from ncu's launch stats.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run8.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2; do for b in xtask-old xtask-base xtask; do for c in on off; do
  timeout 90 ncu --clock-control none --cache-control none -k regex:attention_persistent_hopper --launch-skip 20 --launch-count 5 \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,launch__registers_per_thread,smsp__cycles_active.max,smsp__inst_executed.sum \
    .carry/$b bench-all --kernels persistent-hopper --suite mission --causal $c --no-peers --no-gemm --repeats 3 --sample-ms 5 --out-dir /tmp/n-$b > $L/ncu-$b-$c-$i.log 2>&1
  echo "$b causal=$c try $i: $(grep -E 'gpu__time_duration' $L/ncu-$b-$c-$i.log | awk '{print $NF}' | tr '\n' ' ')" | tee -a $R
done; done; done
for b in xtask-old xtask-base xtask; do
  grep -E "launch__|smsp__" $L/ncu-$b-on-1.log | sort | uniq -c | head -14 | sed "s/^/$b /" | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
