# Reliability of this session's defaults on both generation-5 paths (bad input, out-of-bounds,
# determinism incl. 1000 runs of B=4 H=16 S=8192 D=128 causal, grid and 2^31 limits, NaN/Inf, OOM).
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
timeout 560 $X reliability --kernels persistent-hopper,persistent-portable --only badinput,oob,determinism,grid,nonfinite,oom --json $OUT/rel.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee $OUT/rc.txt
grep -E "^\| " $OUT/reliability.log | awk -F'|' '{print $2,$3,$4}' | tee -a $OUT/rc.txt
