# Ninth device run: paged tiles smaller than a page's worth of the key tile now take one page
# lookup per 16-row group (tile64, portable). Verify both, reliability modes, sanitize, the paged
# suite; then a same-run A/B of the mission shape (1,8,512,64) on the Hopper path: the release
# xtask of 3d690b3 (before the modes, .carry/xtask-old) against this one, alternated 3 times.
# Run from the repo root: bash docs/results/2026-11-25-modes-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/run9.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in tile64 persistent-portable; do
  (timeout 200 $X verify --kernels $k --cases 1000 > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) &
done
wait
cat /tmp/v/rc.txt | tee -a $R; grep -h "passed, " /tmp/v/verify-*.log | tee -a $R
grep -h -A3 "FAIL\|shrunk" /tmp/v/verify-*.log | head -20 | tee -a $R
timeout 100 $X reliability --only modes --kernels tile64,persistent-portable > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| modes" $OUT/reliability.log | cut -c1-100 | tee -a $R
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --out-dir $OUT > $OUT/bench-paged.log 2>&1; echo "bench paged rc=$?" | tee -a $R
grep -E "^\| (decode|chunk|prefill):" $OUT/bench-paged.md | grep "time / contiguous" | cut -c1-120 | tee -a $R
for i in 1 2 3; do for b in xtask-old xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > /tmp/m-$b-$i.log 2>&1
  echo "mission A/B $b try $i: $(grep -E '^\| 1,8,512,64 \|.*persistent-hopper \|' /tmp/m-$b-$i/bench-all.md | cut -c1-110 | tr '\n' ' ')" | tee -a $R
done; done
timeout 150 $X sanitize --kernels tile64,persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R
tail -4 $OUT/sanitize.log | tee -a $R
