# Fourth run of session 13 (H100): where the Hopper backward's time goes at (4,16,2048,128) against
# (1,16,16384,128), non-causal, fp16 (this tree: 80-query steps at both). FA3's anchor is 0.82x us at
# the short shape and 0.94x at the long one.
# (1) ncu kernel time of each of the three launches (prepare, dk_dv, dq_convert_transposed), one
#     call each shape;
# (2) ncu sections of one dk_dv launch at each shape: speed of light, warp states, scheduler,
#     memory workload, launch stats.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in 4,16,2048,128 1,16,16384,128; do SECONDS=0
  timeout 120 ncu -k regex:bwd_hopper -c 3 --metrics gpu__time_duration.sum $X bench-all --pass bwd --kernels persistent-hopper --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-times-$s.log 2>&1
  echo "launch times $s rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "bwd_hopper_[a-z_]+|gpu__time_duration" $L/ncu-times-$s.log | sed 's/  */ /g' | grep -oE "bwd_hopper_[a-z_]+|gpu__time_duration.sum [a-z]+ [0-9.,]+" | paste -sd' ' | tee -a $R
done
for s in 4,16,2048,128 1,16,16384,128; do SECONDS=0
  timeout 200 ncu -k regex:dk_dv -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats -o $L/dkdv-$s $X bench-all --pass bwd --kernels persistent-hopper --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-sec-$s.log 2>&1
  echo "sections $s rc=$? (${SECONDS}s)" | tee -a $R
  ncu -i $L/dkdv-$s.ncu-rep --page details --csv > $L/details-$s.csv 2>&1
  python3 - "$L/details-$s.csv" <<'PY' | tee -a $R
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h = rows[0]; mi = h.index("Metric Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
want = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "L2 Cache Throughput", "DRAM Throughput",
        "Issue Slots Busy", "Issued Warp Per Scheduler", "No Eligible", "Active Warps Per Scheduler",
        "Warp Cycles Per Issued Instruction", "L1/TEX Hit Rate", "L2 Hit Rate", "Mem Busy", "Max Bandwidth"]
for r in rows[1:]:
    if len(r) > vi and r[mi] in want: print(f"  {r[mi]}: {r[vi]} {r[ui]}")
PY
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
