# Ninth run of session 10 (H100): the Hopper forward's unit-taking loop as one helper
# (take_next_unit in gen5_hopper/q_fetch.cuh), used by both producer loops; it moves the dynamic
# builds' PTX (-3 +6 lines), every other build is unchanged.
# (1) verify --cases 1000 (Hopper forward), reliability --only modes, sanitize (Hopper forward);
# (2) same-run A/B against 26dac10's binary (.carry/xtask-26da, forward kernels of 69cfcf3), no
#     peers: the ladder twice alternated, and the paged suite once each.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L /tmp/v9
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 10901 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
(timeout 300 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
(timeout 300 $X sanitize --kernels persistent-hopper --logs /tmp/san9 > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
wait
sort /tmp/v9/rc.txt | tee -a $R
grep -hE "persistent-hopper: [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -4 | tee -a $R
grep -E "PASS|FAIL" $L/reliability-modes.log | cut -c1-110 | tail -12 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for pass in 1 2; do for bin in xtask-26da xtask; do
  timeout 80 .carry/$bin bench-all --suite ladder --kernels persistent-hopper --no-peers --out-dir /tmp/l$bin$pass > $L/ladder-$bin-$pass.log 2>&1; echo "ladder $bin pass $pass rc=$?" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+" /tmp/l$bin$pass/bench-all.md | head -12 | cut -d'|' -f2-7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
for bin in xtask-26da xtask; do
  timeout 80 .carry/$bin bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/pg$bin > $L/paged-$bin.log 2>&1; echo "paged $bin rc=$?" | tee -a $R
  cp /tmp/pg$bin/bench-paged.md $L/paged-$bin.md 2>/dev/null
  grep -E "time / contiguous time" /tmp/pg$bin/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
