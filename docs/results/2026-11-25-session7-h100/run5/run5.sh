# Fifth run, the final kernels: run4's tree plus, for the portable producer alone, each 16-row page
# group of a paged tile loaded through load_tile_async's full-tile path (async_copy.cuh).
# Side by side: verify --cases 1000 on the portable path; reliability --only modes on the four
# modes kernels; compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on Hopper +
# portable and tile64 + scalar. Then the paged suite on the portable path, this tree against
# .carry/xtask-prev (6031875, run4's kernels), alternated.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run5.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 300 $X verify --kernels persistent-portable --cases 1000 --seed 751 > $L/verify-persistent-portable.log 2>&1; echo "verify portable rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper,persistent-portable,tile64,scalar > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 300 $X sanitize --kernels persistent-hopper,persistent-portable --logs /tmp/san1 > $L/sanitize-persistent.log 2>&1; echo "sanitize persistent rc=$?" >> /tmp/v/rc.txt) &
(timeout 300 $X sanitize --kernels tile64,scalar --logs /tmp/san2 > $L/sanitize-tile64-scalar.log 2>&1; echo "sanitize tile64,scalar rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify-persistent-portable.log | tail -1)" | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| (persistent|tile64|scalar)|^sanitize: no|errors" $L/sanitize-*.log | grep -v "^sanitize: /" | tee -a $R
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite paged --kernels persistent-portable --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1; echo "paged $b $i rc=$?" | tee -a $R
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  grep -E "time / contiguous time" /tmp/p-$b-$i/bench-paged.md | cut -d"|" -f2,4 | tr '\n' ';' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
