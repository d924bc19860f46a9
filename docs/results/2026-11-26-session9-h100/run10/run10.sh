# Tenth run of session 9 (H100): run9 found the Hopper backward's causal (4,16,2048,128) row 6 %
# faster with L2 sections of 264 units (two waves) than of 132 (one wave, the default). Is that
# true of every ladder row? FLASHCORE_HOPPER_BWD_SECTION_UNITS = 66, 132, 198, 264, 396 on the
# four issue-14 shapes, causal and not, two passes (no code change).
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run10.txt; L=/tmp/logs10; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for i in 1 2; do for u in 132 66 198 264 396; do
  FLASHCORE_HOPPER_BWD_SECTION_UNITS=$u timeout 90 $X bench-all --pass bwd --kernels persistent-hopper $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b10-$u-$i > $L/u$u-$i.log 2>&1
  echo "units=$u pass $i: $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper' /tmp/b10-$u-$i/bench-bwd.md | head -8 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs10
