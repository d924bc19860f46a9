# Seventh run of session 12 (H100): at D = 64, the atomic schedule's dQ product split over two key
# halves with their own accumulators in one k loop (warp_gemm_atb_pair; FC_DQ_SPLIT_K through the
# temporary hook FLASHCORE_PORTABLE_DQ_DEFINES, not committed): 8 independent MMA chains a warp
# instead of 4 (run3: the dQ loop's first MMAs wait on each other and on ldmatrix). Against
# af6a7fc's kernels (the hook unset), three alternations, no peers, fp16, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic; S="--shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2 3; do for v in base FC_DQ_SPLIT_K=1; do
  if [ $v = base ]; then unset FLASHCORE_PORTABLE_DQ_DEFINES; else export FLASHCORE_PORTABLE_DQ_DEFINES=$v; fi
  n=$(echo $v | tr ',=' '_-')-$pass; SECONDS=0
  timeout 100 $X bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$n > $L/bench-$n.log 2>&1
  echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$n/bench-bwd.md | head -4 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
