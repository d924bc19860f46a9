# Sixth run of session 8 (H100), run5's tree (the final kernels): reliability --only modes and
# compute-sanitizer on all four mode kernels, verify --cases 1000 on the scalar baseline (kv_rows.cuh
# changed under it too), side by side; then a second pass of the paged suite on the three fast
# kernels (the ratios sit near their lines).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run6.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
K=persistent-hopper,persistent-portable,tile64,scalar
(timeout 300 $X reliability --only modes --kernels $K > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X sanitize --kernels persistent-hopper,tile64 --logs /tmp/san1 > $L/sanitize-a.log 2>&1; echo "sanitize hopper,tile64 rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X sanitize --kernels persistent-portable,scalar --logs /tmp/san2 > $L/sanitize-b.log 2>&1; echo "sanitize portable,scalar rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X verify --kernels scalar --cases 1000 --seed 891 > $L/verify-scalar.log 2>&1; echo "verify scalar rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify scalar: $(grep -h 'passed, ' $L/verify-scalar.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify-scalar.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| (persistent|tile64|scalar)|^sanitize: no|errors" $L/sanitize-*.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/p > $L/paged.log 2>&1; echo "paged rc=$?" | tee -a $R
cp /tmp/p/bench-paged.md $L/paged.md
grep -E "time / contiguous time" /tmp/p/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
