# Third run of session 10 (H100): same-run A/Bs, no peers, fp16, alternated twice:
# (1) the portable backward's wide tiles (default) against its 16-row tiles
#     (FLASHCORE_PORTABLE_BWD_TILES=narrow), the issue-14 shapes, causal and not;
# (2) the Hopper backward without causal masking: L2 sections of half a wave
#     (FLASHCORE_HOPPER_BWD_SECTION_UNITS=66) against the default (one wave, 132);
# (3) ncu time of the three portable launches at (4,16,2048,128) non-causal.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do
  for t in narrow wide; do
    SECONDS=0
    FLASHCORE_PORTABLE_BWD_TILES=$t timeout 100 $X bench-all --pass bwd --kernels persistent-portable $S --causal both --dtypes f16 --no-peers --out-dir /tmp/p$t$pass > $L/portable-$t-$pass.log 2>&1; echo "portable $t pass $pass rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/p$t$pass/bench-bwd.md | cut -d'|' -f2-7 | sed "s/^/$t$pass |/" | tee -a $R
  done
done
for pass in 1 2; do
  for u in 132 66; do
    SECONDS=0
    FLASHCORE_HOPPER_BWD_SECTION_UNITS=$u timeout 60 $X bench-all --pass bwd --kernels persistent-hopper $S --shape 2,16,8192,64 --causal off --dtypes f16 --no-peers --out-dir /tmp/h$u$pass > $L/hopper-$u-$pass.log 2>&1; echo "hopper sections $u pass $pass rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+ \| [0-9.]+ \|" /tmp/h$u$pass/bench-bwd.md | cut -d'|' -f2-7 | sed "s/^/s$u-$pass |/" | tee -a $R
  done
done
timeout 60 ncu -k regex:bwd_portable_d -c 3 --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,128 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bnq > $L/ncu-dq.log 2>&1; echo "ncu rc=$?" | tee -a $R
grep -E "bwd_portable_d|gpu__time|hmma|wavefronts|issue_active" $L/ncu-dq.log | sed 's/  */ /g' | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
