# Fourteenth run of session 9 (H100): the producer's Q hand-off and fill as helpers shared by both
# producer loops (q_fetch.cuh; the duplicate the change review found). It also fixes a latent wild
# read in the spread loop: warp 0 computed the sequence info of an unset unit after the dynamic
# schedule ran out. Dense builds' PTX unchanged; the modes builds changed (+2 to +13 lines).
# verify --cases 1000, reliability --only modes and sanitize (Hopper) side by side; the paged suite.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run14/run14.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run14.txt; L=/tmp/logs14; mkdir -p $L /tmp/v14
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 9141 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v14/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$? (${SECONDS}s)" >> /tmp/v14/rc.txt) &
(timeout 200 $X sanitize --kernels persistent-hopper --pass fwd --logs /tmp/san14 > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v14/rc.txt) &
wait
sort /tmp/v14/rc.txt | tee -a $R
grep -hE "passed, " $L/verify.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk\|still running" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
timeout 90 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/b14 > $L/bench-paged.log 2>&1; echo "paged rc=$?" | tee -a $R
cp /tmp/b14/bench-paged.md $L/; grep -E "time / contiguous time" /tmp/b14/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs14
