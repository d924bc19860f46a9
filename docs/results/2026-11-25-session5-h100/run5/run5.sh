# Fifth run: where the committed Hopper backward's time goes, for the next session's design.
# ncu on one launch of bwd_hopper_dk_dv at (1,16,16384,128) and (4,16,2048,64), non-causal:
# pipe utilisation (GMMA, shared-memory wavefronts, XU) and the per-warp stall reasons.
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run5.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
M="gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_red.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for S in 1,16,16384,128 4,16,2048,64; do
  timeout 100 ncu -k regex:bwd_hopper_dk_dv -c 1 --metrics "$M" $X bench-all --pass bwd --kernels persistent-hopper --shape $S --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/nb > $OUT/ncu-$S.log 2>&1; echo "ncu $S rc=$?" | tee -a $R
  grep -E "gpu__time|gmma|pipe_xu|wavefronts|bank_conflicts|issue_active|op_red|stalled" $OUT/ncu-$S.log | awk '$NF+0 >= 0.05 || /gpu__time|gmma|xu|wavefronts|conflicts|issue_active|op_red/' | tee -a $R
done
