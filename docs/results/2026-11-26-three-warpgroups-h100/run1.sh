# First run of session 14 (H100): the Hopper forward with three consumer warpgroups at D = 64
# (192-row q tiles, 160 consumer registers; FLASHCORE_HOPPER_CONSUMER_WGS=3, not the default yet).
# (1) with FLASHCORE_HOPPER_CONSUMER_WGS=3: the debug build (bounded waits trap instead of
#     hanging) on the edge list; then in parallel verify --cases 1000, reliability (determinism,
#     nonfinite, oob) and sanitize, all forward, persistent-hopper;
# (2) the D = 64 ladder rows and the mission shape, causal and not, fp16, no peers: two warpgroups
#     (today's default) against three, alternated twice in one process each.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L /tmp/v1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
FLASHCORE_HOPPER_CONSUMER_WGS=3 FLASHCORE_HOPPER_DEBUG=1 timeout 150 $X verify --kernels $H --edge-only > $L/verify-debug-edge.log 2>&1; echo "debug edge rc=$? (${SECONDS}s)" | tee -a $R
grep -hE "passed, " $L/verify-debug-edge.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk\|trap\|still running" $L/verify-debug-edge.log | head -8 | tee -a $R
export FLASHCORE_HOPPER_CONSUMER_WGS=3
SECONDS=0
(timeout 300 $X verify --kernels $H --cases 1000 --seed 14101 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
(timeout 300 $X reliability --only determinism,nonfinite,oob --kernels $H > $L/reliability.log 2>&1; echo "reliability rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
(timeout 300 $X sanitize --kernels $H --pass fwd --logs /tmp/san1 > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
wait
unset FLASHCORE_HOPPER_CONSUMER_WGS
sort /tmp/v1/rc.txt | tee -a $R
grep -hE "passed, " $L/verify.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk\|still running" $L/verify.log | head -8 | tee -a $R
grep -E "^[a-z]+ +persistent-hopper" $L/reliability.log | cut -c1-100 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
S="--shape 1,8,512,64 --shape 4,16,2048,64 --shape 2,16,8192,64"
for i in 1 2; do for w in 2 3; do SECONDS=0
  FLASHCORE_HOPPER_CONSUMER_WGS=$w timeout 120 $X bench-all --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b1-$w-$i > $L/bench-wgs$w-$i.log 2>&1
  echo "wgs=$w pass $i (rc=$?, ${SECONDS}s): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]' /tmp/b1-$w-$i/bench-all.md | cut -d'|' -f2,4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  cp /tmp/b1-$w-$i/bench-all.md $L/bench-wgs$w-$i.md
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs1
