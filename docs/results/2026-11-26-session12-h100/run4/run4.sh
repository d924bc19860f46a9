# Fourth run of session 12 (H100): the atomic schedule's product loops, after run3's profile
# (stalls at D = 64: fixed-latency waits 34 %, ldmatrix waits 14 %; the S, dP and dQ loops cost
# twice per MMA what the unrolled dV/dK products do). Variants as extra defines through a temporary
# hook (FLASHCORE_PORTABLE_DQ_DEFINES, not committed): base; FC_SDP_MERGED (Sᵀ and dPᵀ in one k
# loop, warp_gemm_abt_pair); FC_DQ_K_UNROLL=8 (the dQ k loop unrolled 8 steps instead of 4, at
# every D: fully at D = 64, half at D = 128); both; merged with FC_SDP_K_UNROLL=1 (the Sᵀ/dPᵀ loop
# rolled); that with FC_DQ_K_UNROLL=8. No peers, fp16, causal and not, alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128"
for pass in 1 2; do
  for v in base FC_SDP_MERGED=1 FC_DQ_K_UNROLL=8 FC_SDP_MERGED=1,FC_DQ_K_UNROLL=8 FC_SDP_MERGED=1,FC_SDP_K_UNROLL=1 FC_SDP_MERGED=1,FC_SDP_K_UNROLL=1,FC_DQ_K_UNROLL=8; do
    if [ $v = base ]; then unset FLASHCORE_PORTABLE_DQ_DEFINES; else export FLASHCORE_PORTABLE_DQ_DEFINES=$v; fi
    n=$(echo $v | tr ',=' '_-')-$pass; SECONDS=0
    timeout 100 $X bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$n > $L/bench-$n.log 2>&1
    echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$n/bench-bwd.md | head -8 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  done
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
