# Sixth run: the Hopper modes producer finishes a V tile's zeroed tail one fetch later, after the
# next K tile went out (kv_fetch.cuh finish_v_tail), instead of stalling the ring on that tile's
# copies. A debug verify (bounded mbarrier waits: a deadlock traps) beside verify --cases 1000,
# then the varlen and paged suites (ratios within the run; run5 is the before).
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run6.txt; mkdir -p /tmp/v /tmp/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
(FLASHCORE_HOPPER_DEBUG=1 timeout 200 $X verify --kernels persistent-hopper --cases 250 --seed 661 > /tmp/logs/verify-debug.log 2>&1; echo "verify debug rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 662 > /tmp/logs/verify.log 2>&1; echo "verify rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in verify-debug verify; do echo "$f: $(grep -h 'passed, ' /tmp/logs/$f.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk\|stuck" /tmp/logs/$f.log | head -8 | tee -a $R; done
timeout 70 $X bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/varlen > /tmp/logs/bench-varlen.log 2>&1; echo "varlen bench rc=$?" | tee -a $R
grep -E "^\| varlen (TFLOP|with every)" /tmp/varlen/bench-varlen.md | cut -d"|" -f2-5 | tee -a $R
timeout 70 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/paged > /tmp/logs/bench-paged.log 2>&1; echo "paged bench rc=$?" | tee -a $R
grep -E "time / contiguous time" /tmp/paged/bench-paged.md | cut -d"|" -f2-6 | tee -a $R
cp /tmp/varlen/bench-varlen.md /tmp/paged/bench-paged.md /tmp/logs/ 2>/dev/null
tar cJf $OUT/logs.tar.xz -C /tmp logs
