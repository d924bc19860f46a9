# Second run: ncu of the varlen suite's gap on the persistent paths (issue 11: varlen at
# 0.91-0.93x the dense rate; about 6 % of it at uniform lengths). One launch each of
# varlen-uniform (modes build) and dense-eq (dense build), B = 16 x 2688, causal, full set;
# the SASS page with per-instruction counts and stall samples is exported for a diff.
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run2.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in persistent-hopper persistent-portable; do
  for c in varlen-uniform dense-eq varlen; do
    [ $k = persistent-portable ] && [ $c = varlen ] && continue
    n=$k-$c
    timeout 150 ncu --kernel-name regex:attention_persistent --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/$n \
      $X bench-all --suite varlen --case $c --kernels $k --no-peers --quick --check-rows 64 --out-dir /tmp/b-$n > $OUT/ncu-$n.log 2>&1
    echo "$n ncu rc=$?" | tee -a $R
    ncu -i /tmp/$n.ncu-rep --page details --csv > $OUT/details-$n.csv 2>&1
    ncu -i /tmp/$n.ncu-rep --page source --csv --print-source sass > $OUT/sass-$n.csv 2>&1
    grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput)"' $OUT/details-$n.csv | cut -d, -f12- | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  done
done
ls -la $OUT | tee -a $R
