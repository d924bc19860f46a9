# Fourth run. Backward: the 128-query D = 64 default (verify --pass bwd --cases 1000,
# reliability --only backward, sanitize --pass bwd) and the committed backward bench with the
# peers. Forward: the Hopper modes producer polling with lane 0 only (verify --cases 1000 beside
# the backward checks), then the varlen and paged suites again.
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run4.txt; mkdir -p /tmp/v /tmp/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
(timeout 330 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 641 > /tmp/logs/verify-bwd.log 2>&1; echo "verify bwd rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X reliability --only backward --kernels persistent-hopper > /tmp/logs/rel-bwd.log 2>&1; echo "reliability bwd rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X sanitize --pass bwd --kernels persistent-hopper --logs /tmp/sanlogs > /tmp/logs/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$?" >> /tmp/v/rc.txt) &
(timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 642 > /tmp/logs/verify-fwd.log 2>&1; echo "verify fwd rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in verify-bwd verify-fwd; do echo "$f: $(grep -h 'passed, ' /tmp/logs/$f.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" /tmp/logs/$f.log | head -8 | tee -a $R; done
grep -E "^reliability:|^sanitize:|^\| persistent-hopper \(bwd\)" /tmp/logs/rel-bwd.log /tmp/logs/sanitize-bwd.log | tee -a $R
timeout 100 $X bench-all --suite varlen --kernels persistent-hopper,persistent-portable --no-peers --out-dir /tmp/varlen > /tmp/logs/bench-varlen.log 2>&1; echo "varlen bench rc=$?" | tee -a $R
grep -E "^\| varlen (TFLOP|with every)" /tmp/varlen/bench-varlen.md | cut -d"|" -f2-5 | tee -a $R
timeout 80 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/paged > /tmp/logs/bench-paged.log 2>&1; echo "paged bench rc=$?" | tee -a $R
grep -E "time / contiguous time" /tmp/paged/bench-paged.md | cut -d"|" -f2-6 | tee -a $R
timeout 150 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 2,16,8192,64 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > /tmp/logs/bench-bwd.log 2>&1; echo "bench bwd rc=$?" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| [a-z0-9_-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+×" /tmp/logs/bench-bwd.log | cut -d'|' -f2-9 | tee -a $R
cp /tmp/varlen/bench-varlen.md /tmp/paged/bench-paged.md /tmp/bb/bench-bwd.md /tmp/logs/ 2>/dev/null
tar cJf $OUT/logs.tar.xz -C /tmp logs
