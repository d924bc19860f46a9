# Ninth run of session 11 (H100): why the atomic schedule trails FA2 at (2,16,8192,64) non-causal
# (0.98x in run7) but not at (4,16,2048,64): ncu of its dK/dV launch at both shapes (no L2 sections
# at D = 64): L2 hit rate, memory and reduction traffic, tensor pipe.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,lts__t_sectors_op_red.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
for s in 4,16,2048,64 2,16,8192,64; do
  SECONDS=0
  timeout 100 ncu -k regex:dk_dv_wide -c 1 --metrics $M $X bench-all --pass bwd --kernels persistent-portable-atomic --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-$s.log 2>&1; echo "ncu $s rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "gpu__time|hmma|lts__|dram__|stalled" $L/ncu-$s.log | sed 's/  */ /g' | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
