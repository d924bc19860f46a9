# Thirteenth run of session 10 (H100): the Hopper backward's non-causal D = 128 rows are 1-4 %
# ahead of cuDNN with half-wave L2 sections (66 units). Smaller sections: 22, 33, 44 against 66
# (FLASHCORE_HOPPER_BWD_SECTION_UNITS), two passes, no peers, fp16, non-causal.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run13/run13.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run13.txt; L=/tmp/logs13; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for pass in 1 2; do for u in 66 44 33 22; do
  FLASHCORE_HOPPER_BWD_SECTION_UNITS=$u timeout 60 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal off --dtypes f16 --no-peers --out-dir /tmp/h$u$pass > $L/h-$u-$pass.log 2>&1; echo -n "units $u pass $pass rc=$? " | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| no \| persistent-hopper \| [0-9.]+" /tmp/h$u$pass/bench-bwd.md | head -3 | cut -d'|' -f2,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs13
