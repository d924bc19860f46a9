# Tenth run of session 10 (H100): run9 read the (8,32,4096,128) ladder rows 1-5 % slower with
# take_next_unit (the dynamic schedule's build) than without, with the old binary itself moving
# 3 % between passes. Four more alternations of that shape alone, causal and not, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run10.txt; L=/tmp/logs10; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for pass in 1 2 3 4; do for bin in xtask-26da xtask; do
  timeout 60 .carry/$bin bench-all --kernels persistent-hopper --shape 8,32,4096,128 --causal both --dtypes f16 --no-peers --out-dir /tmp/s$bin$pass > $L/s-$bin-$pass.log 2>&1; echo -n "$bin pass $pass rc=$? " | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+" /tmp/s$bin$pass/bench-all.md | head -2 | cut -d'|' -f4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs10
