# Third run of session 8: the Hopper cp.async paged path copied by all four producer warps
# (producer.cuh: one loop per K/V form; run2's single-warp copy ran at 1.8x contiguous).
# verify --cases 1000 on Hopper beside reliability --only modes and compute-sanitizer (Hopper);
# then the paged suite on Hopper three ways in one binary: the default (cp.async below 64-row
# page groups), FLASHCORE_HOPPER_PAGED_CP_ASYNC_ROWS=128 (block 64 by cp.async too) and =16 (TMA
# everywhere, the session-7 path); the varlen suite (Hopper); and the mission problem against
# 13cf0d5 (.carry/xtask-base), alternated three times (the dense build's producer moved into
# producer.cuh and its LSE offset changed).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run3.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 280 $X verify --kernels persistent-hopper --cases 1000 --seed 861 > $L/verify-hopper.log 2>&1; echo "verify hopper rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 280 $X sanitize --kernels persistent-hopper --logs /tmp/san1 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify-hopper.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify-hopper.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
paged() { # name [env]
  env $2 timeout 90 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$1 > $L/paged-$1.log 2>&1; echo "paged $1 rc=$?" | tee -a $R
  cp /tmp/p-$1/bench-paged.md $L/paged-$1.md
  grep -E "time / contiguous time" /tmp/p-$1/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
}
paged default
paged cp128 FLASHCORE_HOPPER_PAGED_CP_ASYNC_ROWS=128
paged tma FLASHCORE_HOPPER_PAGED_CP_ASYNC_ROWS=16
timeout 60 $X bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/b-varlen > $L/bench-varlen.log 2>&1; echo "varlen rc=$?" | tee -a $R
cp /tmp/b-varlen/bench-varlen.md $L/; grep -E "^\| varlen (TFLOP|with every)" /tmp/b-varlen/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
for i in 1 2 3; do for b in xtask-base xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1; echo "mission $b $i rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph" /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
