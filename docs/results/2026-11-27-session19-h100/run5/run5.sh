# Fifth run of session 19 (H100): what the mission shape's key loop is bound by. run4: inputs
# resident in L2 take it only 1 % faster (4.95 / 4.91 -> 4.90 / 4.85 µs) and leave the key loop at
# ~4 000 cycles for two 128-key tiles a warpgroup, so it is not waiting on DRAM. Per CTA the loop
# does 4 tiles x 64 x 128 exponentials (32 768 MUFU.EX2: ~2 048 cycles at 16 a cycle) and 4 x 2
# GEMMs (~2 048 tensor cycles). ncu, one launch each, the pipes' utilisation and the warp stall
# reasons: (1) the mission shape non-causal, (2) the ladder's (4,16,2048,64) non-causal.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs5; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.sum,sm__cycles_active.avg,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio"
prof() {  # label, xtask args...
  label=$1; shift
  timeout 150 ncu -k regex:attention_persistent_hopper -c 1 $S $X "$@" --out-dir $L/b-$label > $L/ncu-$label.log 2>&1
  echo "== ncu $label: rc=$?" | tee -a $R
  grep -E "Duration|pipe|Pipe|Stall|stall|Issue Slots|Executed Ipc|Warp Cycles|sm__cycles_active" $L/ncu-$label.log | head -40 | tee -a $R
}
prof mission bench-all --shape 1,8,512,64 --causal off --dtypes f16 --kernels persistent-hopper --no-peers --quick
prof ladder64 bench-all --shape 4,16,2048,64 --causal off --dtypes f16 --kernels persistent-hopper --no-peers --quick
pack
