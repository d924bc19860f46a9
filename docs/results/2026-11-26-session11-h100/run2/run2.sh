# Second run of session 11 (H100): what limits the atomic-dQ schedule (run1: 1.16-1.25x faster
# than the deterministic one, 0.90-1.15x SDPA flash). ncu, one launch each of the three kernels,
# (4,16,2048,64) and (4,16,2048,128) non-causal, f16: pipes, shared memory, L2, issue and stalls.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,lts__t_sectors_op_red.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__inst_executed_op_global_red.sum
for d in 64 128; do
  SECONDS=0
  timeout 150 ncu -k regex:bwd_portable_d -c 3 --metrics $M $X bench-all --pass bwd --kernels persistent-portable-atomic --shape 4,16,2048,$d --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn$d > $L/ncu-$d.log 2>&1; echo "ncu D=$d rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "bwd_portable_d|gpu__time|hmma|wavefronts|issue_active|bank_conflicts|stalled|lts__|dram__|inst_executed" $L/ncu-$d.log | grep -v dot_do_o | sed 's/  */ /g' | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
