# Fourth device run: the varlen and window bench suites (issue 11) on the three fast kernels that
# claim the modes, peers (PyTorch SDPA flash / cuDNN / efficient) in the same run.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in varlen window; do
  timeout 280 $X bench-all --suite $s --kernels persistent-hopper,persistent-portable,tile64 --out-dir $OUT > $OUT/bench-$s.log 2>&1; echo "bench $s rc=$?" | tee -a $R
done
for s in varlen window; do grep -A30 -i "comparison" $OUT/bench-$s.md | head -30 | tee -a $R; done
