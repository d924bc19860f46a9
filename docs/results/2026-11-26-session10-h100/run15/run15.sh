# Fifteenth run of session 10 (H100): the D = 128 dK/dV kernel's Sᵀ product rolled by whole
# swizzle periods on sm_90 (no per-step swizzle arithmetic; run11 counted 327 M instructions for
# ~67 M HMMAs). verify --pass bwd 300 (portable), then a same-run A/B against 954f28a's binary
# (.carry/xtask-head), D = 128 rows, causal and not, three alternations, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run15/run15.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run15.txt; L=/tmp/logs15; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 120 $X verify --pass bwd --kernels persistent-portable --cases 300 --seed 11501 > $L/verify-bwd.log 2>&1; echo "verify bwd rc=$? (${SECONDS}s)" | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-bwd.log | tail -3 | tee -a $R
for pass in 1 2 3; do for bin in xtask-head xtask; do
  timeout 60 .carry/$bin bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,128 --shape 8,32,4096,128 --causal both --dtypes f16 --no-peers --out-dir /tmp/p$bin$pass > $L/p-$bin-$pass.log 2>&1; echo -n "$bin pass $pass rc=$? " | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \|" /tmp/p$bin$pass/bench-bwd.md | head -4 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs15
